package events_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustEvent(t testing.TB, run string, k events.Kind, body any) events.Event {
	t.Helper()
	e, err := events.New(run, k, body)
	if err != nil {
		t.Fatalf("new event: %v", err)
	}
	return e
}

// startRun appends run.created and n observed-less decisions, returning the tail.
func startRun(t testing.TB, ctx context.Context, l *events.Log, run string) events.Tail {
	t.Helper()
	tail, err := l.Append(ctx, events.Tail{}, mustEvent(t, run, events.RunCreated, events.RunCreatedBody{}))
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	return tail
}

func TestLog_AppendAndReadBack(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	tail := startRun(t, ctx, l, "r1")
	for i := 1; i <= 5; i++ {
		var err error
		tail, err = l.Append(ctx, tail, mustEvent(t, "r1", events.StepDecided, events.StepDecidedBody{Step: i, Tool: "read", Args: `{"n":` + fmt.Sprint(i) + `}`}))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	recs, got, err := l.Read(ctx, "r1")
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if got != tail {
		t.Errorf("tail: got %+v, want %+v", got, tail)
	}
	if len(recs) != 6 {
		t.Fatalf("got %d events, want 6", len(recs))
	}
	for i, r := range recs {
		if r.Event.Seq != uint64(i+1) {
			t.Errorf("event %d: seq %d", i, r.Event.Seq)
		}
	}
	d, err := events.DecodeBody[events.StepDecidedBody](recs[3].Event)
	if err != nil || d.Step != 3 || d.Args != `{"n":3}` {
		t.Errorf("event 3 body: got %+v, %v", d, err)
	}
	if _, _, err := l.Read(ctx, "nope"); !errors.Is(err, events.ErrNoRun) {
		t.Errorf("read missing run: got %v, want ErrNoRun", err)
	}
}

func TestLog_ConcurrentAppendsExactlyOneWins(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	const writers, rounds = 8, 200
	tail := startRun(t, ctx, l, "race")
	conflicts := 0
	for round := 1; round <= rounds; round++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []events.Tail
		start := make(chan struct{})
		for w := 0; w < writers; w++ {
			ev := mustEvent(t, "race", events.StepDecided, events.StepDecidedBody{Step: round, Tool: fmt.Sprintf("w%d", w)})
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				nt, err := l.Append(ctx, tail, ev)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners = append(winners, nt)
				case errors.Is(err, events.ErrConflict):
					conflicts++
				default:
					t.Errorf("round %d: unexpected error %v", round, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, len(winners))
		}
		tail = winners[0]
	}
	if conflicts != rounds*(writers-1) {
		t.Errorf("conflicts: got %d, want %d", conflicts, rounds*(writers-1))
	}
	recs, _, err := l.Read(ctx, "race")
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if len(recs) != rounds+1 {
		t.Fatalf("got %d events, want %d", len(recs), rounds+1)
	}
	datas := make([][]byte, len(recs))
	for i, r := range recs {
		datas[i] = r.Data
		if r.Event.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d: not gap-free", i, r.Event.Seq)
		}
	}
	if err := events.VerifyChain("race", datas); err != nil {
		t.Errorf("chain: %v", err)
	}
}

func TestLog_RetriedAppendAfterLostAckIsRecognised(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	t0 := startRun(t, ctx, l, "r")
	ev := mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "x"})
	t1, err := l.Append(ctx, t0, ev)
	if err != nil {
		t.Fatal(err)
	}
	// The ack was "lost": the writer retries the same event on the old tail.
	t2, err := l.Append(ctx, t0, ev)
	if err != nil {
		t.Fatalf("retry: got %v, want recognised success", err)
	}
	if t2 != t1 {
		t.Errorf("retry tail: got %+v, want %+v", t2, t1)
	}
	recs, _, err := l.Read(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Errorf("got %d events, want 2 (no duplicate)", len(recs))
	}
	// A different event on the stale tail is a conflict, not a success.
	other := mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "y"})
	if _, err := l.Append(ctx, t0, other); !errors.Is(err, events.ErrConflict) {
		t.Errorf("stale append of another event: got %v, want ErrConflict", err)
	}
}

func TestLog_FirstAppendIsFencedOnEmptyRun(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	startRun(t, ctx, l, "r")
	if _, err := l.Append(ctx, events.Tail{}, mustEvent(t, "r", events.RunCreated, events.RunCreatedBody{})); !errors.Is(err, events.ErrConflict) {
		t.Errorf("second create: got %v, want ErrConflict", err)
	}
}

func TestLog_StreamRefusesDeleteAndPurge(t *testing.T) {
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	startRun(t, ctx, l, "r")
	s, err := env.JS.Stream(ctx, l.StreamName(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, 1); err == nil {
		t.Error("delete message: got nil error, want refusal")
	}
	if err := s.Purge(ctx); err == nil {
		t.Error("purge: got nil error, want refusal")
	}
	if _, _, err := l.Read(ctx, "r"); err != nil {
		t.Errorf("read after refused delete/purge: %v", err)
	}
}

func TestOpen_IsIdempotentAndRefusesReshard(t *testing.T) {
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	cfg := events.Config{Shards: 2}
	env.Log(t, cfg)
	env.Log(t, cfg)
	if _, err := events.Open(ctx, env.JS, events.Config{Shards: 3}); err == nil {
		t.Error("open with another shard count: got nil error")
	}
	info, err := env.JS.Stream(ctx, "ARB_RUNS_0")
	if err != nil {
		t.Fatal(err)
	}
	c := info.CachedInfo().Config
	if !c.DenyDelete || !c.DenyPurge || !c.AllowDirect || c.Retention != jetstream.LimitsPolicy || c.Storage != jetstream.FileStorage {
		t.Errorf("stream config: %+v", c)
	}
	if err := (events.Config{Shards: -1}).Validate(); err == nil {
		t.Error("negative shards: got nil error")
	}
}

func TestLog_ShardsPlaceRunsAndReadBack(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{Shards: 4})
	used := map[int]bool{}
	for i := 0; i < 32; i++ {
		run := fmt.Sprintf("run%d", i)
		used[l.Shard(run)] = true
		startRun(t, ctx, l, run)
		recs, _, err := l.Read(ctx, run)
		if err != nil || len(recs) != 1 {
			t.Fatalf("read %s: %d events, %v", run, len(recs), err)
		}
	}
	if len(used) < 2 {
		t.Errorf("32 runs landed on %d shard(s)", len(used))
	}
	if got := l.ApprovalFilters(); len(got) != 4 || got[1] != "arb.run.1.*.approval.>" {
		t.Errorf("approval filters: %v", got)
	}
}

func TestLog_ScanReadsStreamInOrder(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	tails := map[string]events.Tail{}
	for i := 0; i < 30; i++ {
		run := fmt.Sprintf("r%d", i%3)
		ev := mustEvent(t, run, events.RunCreated, events.RunCreatedBody{})
		if tails[run].Count > 0 {
			ev = mustEvent(t, run, events.StepDecided, events.StepDecidedBody{Step: int(tails[run].Count)})
		}
		nt, err := l.Append(ctx, tails[run], ev)
		if err != nil {
			t.Fatal(err)
		}
		tails[run] = nt
	}
	var seqs []uint64
	err := l.Scan(ctx, 0, 1, func(r events.RawRecord) error {
		seqs = append(seqs, r.StreamSeq)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 30 || seqs[0] != 1 || seqs[29] != 30 {
		t.Errorf("scan: got %d records %v", len(seqs), seqs)
	}
}

func TestLog_ReadAfterSnapshot(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	t1 := startRun(t, ctx, l, "r")
	tail := t1
	for i := 1; i <= 3; i++ {
		var err error
		tail, err = l.Append(ctx, tail, mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: i}))
		if err != nil {
			t.Fatal(err)
		}
	}
	recs, got, err := l.Since(ctx, "r", t1)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Event.Seq != 2 || got != tail {
		t.Errorf("read after: %d records, tail %+v", len(recs), got)
	}
	// A snapshot whose tail the log does not hold is refused: a wrong
	// hash, a wrong position, a stream sequence of another message.
	for name, bad := range map[string]events.Tail{
		"hash":     {Seq: t1.Seq, Count: t1.Count, Hash: "00"},
		"position": {Seq: t1.Seq, Count: t1.Count + 1, Hash: t1.Hash},
		"seq":      {Seq: t1.Seq + 1, Count: t1.Count, Hash: t1.Hash},
		"beyond":   {Seq: tail.Seq + 10, Count: tail.Count + 10, Hash: tail.Hash},
	} {
		if _, _, err := l.Since(ctx, "r", bad); !errors.Is(err, events.ErrBrokenChain) {
			t.Errorf("snapshot tail with a wrong %s: got %v, want ErrBrokenChain", name, err)
		}
	}
}

func TestLog_SinceReadsWhatWasAppendedAfterATail(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	t1 := startRun(t, ctx, l, "r")
	tails := []events.Tail{t1}
	for i := 1; i <= 4; i++ {
		nt, err := l.Append(ctx, tails[len(tails)-1], mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: i}))
		if err != nil {
			t.Fatal(err)
		}
		tails = append(tails, nt)
	}
	last := tails[len(tails)-1]
	for _, tc := range []struct {
		name string
		from events.Tail
		want int
	}{{"up to date", last, 0}, {"one behind", tails[3], 1}, {"three behind", tails[1], 3}, {"from nothing", events.Tail{}, 5}} {
		recs, tail, err := l.Since(ctx, "r", tc.from)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(recs) != tc.want || tail != last {
			t.Errorf("%s: got %d events and tail %+v, want %d and %+v", tc.name, len(recs), tail, tc.want, last)
		}
		if tc.want > 0 && recs[len(recs)-1].Event.Seq != last.Count {
			t.Errorf("%s: last event read is %d, want %d", tc.name, recs[len(recs)-1].Event.Seq, last.Count)
		}
	}
	stale := tails[3]
	stale.Hash = "00"
	if _, _, err := l.Since(ctx, "r", stale); !errors.Is(err, events.ErrBrokenChain) {
		t.Errorf("a tail whose hash is not the log's: got %v, want ErrBrokenChain", err)
	}
	if _, _, err := l.Since(ctx, "none", events.Tail{}); !errors.Is(err, events.ErrNoRun) {
		t.Errorf("unknown run: got %v, want ErrNoRun", err)
	}
}
