package events_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
)

// appendN appends n events spread over three runs named prefix0..2.
func appendN(t *testing.T, ctx context.Context, l *events.Log, prefix string, n int) {
	t.Helper()
	tails := map[string]events.Tail{}
	for i := 0; i < n; i++ {
		run := fmt.Sprintf("%s%d", prefix, i%3)
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
}

// TestLog_ScanReadsPastBatchesWithoutConsumers: a scan longer than one batch
// direct get reads every message once, in order, from where it was asked
// to, and leaves no consumer behind (it never made one).
func TestLog_ScanReadsPastBatchesWithoutConsumers(t *testing.T) {
	ctx := ctxT(t)
	js := testkit.JetStream(t)
	l := js.Log(t, events.Config{})
	appendN(t, ctx, l, "r", 2500)
	for _, from := range []uint64{0, 1, 1000, 2500, 2501} {
		var seqs []uint64
		err := l.Scan(ctx, 0, from, func(r events.RawRecord) error {
			seqs = append(seqs, r.StreamSeq)
			return nil
		})
		if err != nil {
			t.Fatalf("scan from %d: %v", from, err)
		}
		first := max(from, 1)
		want := 2500 - int(first) + 1
		if len(seqs) != want {
			t.Fatalf("scan from %d: %d records, want %d", from, len(seqs), want)
		}
		for i, s := range seqs {
			if s != first+uint64(i) {
				t.Fatalf("scan from %d: record %d has stream seq %d, want %d", from, i, s, first+uint64(i))
			}
		}
	}
	s, err := js.JS.Stream(ctx, l.StreamName(0))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Errorf("stream has %d consumers after scans, want 0", info.State.Consumers)
	}
}

func TestLog_ScanStopsOnCallbackError(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	appendN(t, ctx, l, "r", 10)
	errStop := errors.New("stop here")
	n := 0
	err := l.Scan(ctx, 0, 1, func(events.RawRecord) error {
		n++
		if n == 4 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) || n != 4 {
		t.Errorf("scan = %v after %d records, want %v after 4", err, n, errStop)
	}
}

// TestLog_FollowSeesLaterAppends: Follow hands what is stored, then what is
// appended while it waits, in order, and returns nil when its context ends.
func TestLog_FollowSeesLaterAppends(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{Shards: 2})
	appendN(t, ctx, l, "a", 30)
	got := make(chan events.RawRecord, 100)
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- l.Follow(fctx, 1, 0, func(r events.RawRecord) error { got <- r; return nil })
	}()
	var n uint64
	recv := func(want uint64) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for n < want {
			select {
			case r := <-got:
				n++
				if r.StreamSeq != n || r.Stream != l.StreamName(1) {
					t.Fatalf("follow handed %s seq %d, want %s seq %d", r.Stream, r.StreamSeq, l.StreamName(1), n)
				}
			case <-deadline:
				t.Fatalf("follow handed %d records in 5s, want %d", n, want)
			}
		}
	}
	s, err := l.JetStream().Stream(ctx, l.StreamName(1))
	if err != nil {
		t.Fatal(err)
	}
	count := func() uint64 {
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	recv(count())
	// Appended after Follow has caught up and is polling.
	time.Sleep(2 * events.FollowPoll)
	appendN(t, ctx, l, "b", 30)
	recv(count())
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("follow = %v after its context ended, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not return within 5s of its context ending")
	}
	select {
	case r := <-got:
		t.Errorf("follow handed seq %d more than was stored", r.StreamSeq)
	default:
	}
}

// TestLog_ScanOfReplicatedLogReadsToTheEnd: on three servers, with direct
// gets answered by any replica, a scan started right after the appends
// through each server still reads every event up to the end the stream
// reported.
func TestLog_ScanOfReplicatedLogReadsToTheEnd(t *testing.T) {
	servers := testkit.Cluster(t, 3)
	ctx := ctxT(t)
	l, err := events.Open(ctx, testkit.ConnectCluster(t, servers).JS, events.Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, ctx, l, "r", 300)
	for i, srv := range servers {
		nc, err := srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		ol, err := events.Attach(ctx, testkit.OnConn(t, srv, nc).JS, events.Config{Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := ol.Scan(ctx, 0, 1, func(events.RawRecord) error { n++; return nil }); err != nil {
			t.Fatalf("scan through server %d: %v", i, err)
		}
		if n != 300 {
			t.Errorf("scan through server %d: %d records, want 300", i, n)
		}
	}
}
