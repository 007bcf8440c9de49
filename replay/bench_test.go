package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkReplay re-checks a stream of ARBITER_REPLAY_BENCH_EVENTS events
// (default 1M; 100k with -short) against the side-effect policy and, in the
// same run, measures the bare cost of reading and decoding the same stream.
// The stream holds runs of 10 steps (32 events, 10 evaluations each), 64 in
// flight at a time and interleaved, published asynchronously as pre-encoded
// valid events. It reports evaluations per second for both, their ratio, and
// the live heap while checking half the stream and the whole of it: the
// process's, and the part package replay allocated.
//
//	go test ./replay -run '^$' -bench BenchmarkReplay -benchtime 1x
func BenchmarkReplay(b *testing.B) {
	n := 1_000_000
	if testing.Short() {
		n = 100_000
	}
	if s := os.Getenv("ARBITER_REPLAY_BENCH_EVENTS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 64 {
			b.Fatalf("ARBITER_REPLAY_BENCH_EVENTS=%q: want a number of events, at least 64", s)
		}
		n = v
	}
	ctx := context.Background()
	env := testkit.JetStream(b)
	log := env.Log(b, events.Config{})
	evals := buildStream(b, env.JS, log, n)
	p := policy.WithID(policy.DefaultSideEffects(), benchPolicyID)

	// One untimed read first, so that neither measure pays for a cold
	// server cache.
	if err := log.Scan(ctx, 0, 1, func(events.RawRecord) error { return nil }); err != nil {
		b.Fatal(err)
	}
	var bare, checked time.Duration
	for b.Loop() {
		start := time.Now()
		decoded := 0
		err := log.Scan(ctx, 0, 1, func(r events.RawRecord) error {
			if _, err := events.Decode(r.Data); err != nil {
				return err
			}
			decoded++
			return nil
		})
		if err != nil || decoded != n {
			b.Fatalf("bare scan: %d events decoded of %d: %v", decoded, n, err)
		}
		bare += time.Since(start)

		start = time.Now()
		sum, err := replay.Audit(ctx, log, p, replay.Selection{}, replay.Options{}, nil)
		checked += time.Since(start)
		if err != nil || sum.Same != evals || sum.Evaluations != evals {
			b.Fatalf("check: %d same of %d evaluations, want all %d: %v", sum.Same, sum.Evaluations, evals, err)
		}
	}
	iters := float64(b.N)
	bareRate := float64(evals) * iters / bare.Seconds()
	replayRate := float64(evals) * iters / checked.Seconds()
	b.ReportMetric(bareRate, "bare-evals/s")
	b.ReportMetric(replayRate, "replay-evals/s")
	b.ReportMetric(replayRate/bareRate, "replay/bare")
	b.ReportMetric(float64(n)*iters/checked.Seconds(), "replay-events/s")

	half := liveHeap(b, log, p, uint64(n/2))
	whole := liveHeap(b, log, p, uint64(n))
	b.ReportMetric(half.process/(1<<20), "live-MB@half")
	b.ReportMetric(whole.process/(1<<20), "live-MB@whole")
	b.ReportMetric(half.replay/(1<<10), "replay-live-KB@half")
	b.ReportMetric(whole.replay/(1<<10), "replay-live-KB@whole")
	b.ReportMetric(float64(max(half.runs, whole.runs)), "peak-runs")
	b.ReportMetric(float64(evals), "evaluations")
}

const benchPolicyID = "side-effects bench"

// heap is what a check held at its largest.
type heap struct {
	process float64 // live heap of the process above what it held before
	replay  float64 // live heap allocated under package replay
	runs    int     // runs held at once
}

// liveHeap checks the stream up to toSeq and measures, after a collection
// every tenth of the stretch, the live heap: of the whole process (which
// includes the embedded server's block cache) and of what package replay
// allocated (its views, pending results and pipeline, from the heap
// profile, sampled every 4 KiB and scaled as pprof does).
func liveHeap(b *testing.B, log *events.Log, p policy.Policy, toSeq uint64) heap {
	b.Helper()
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	runtime.MemProfileRate = 4096
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	var h heap
	every := toSeq / 10
	next := every
	sum, err := replay.Audit(context.Background(), log, p, replay.Selection{ToSeq: toSeq}, replay.Options{
		Progress: func(pr replay.Progress) {
			if pr.Events < next {
				return
			}
			next += every
			h.replay = max(h.replay, replayHeap())
			runtime.ReadMemStats(&ms)
			h.process = max(h.process, float64(ms.HeapAlloc)-float64(before))
		},
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	h.runs = sum.PeakRuns
	return h
}

// replayHeap returns the live bytes allocated with package replay on the
// stack, from the heap profile after two collections (the profile trails
// the heap by one).
func replayHeap() float64 {
	runtime.GC()
	runtime.GC()
	n, _ := runtime.MemProfile(nil, true)
	recs := make([]runtime.MemProfileRecord, n+64)
	n, _ = runtime.MemProfile(recs, true)
	rate := float64(runtime.MemProfileRate)
	total := 0.0
	for _, r := range recs[:n] {
		if r.InUseObjects() == 0 {
			continue
		}
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.HasPrefix(f.Function, "github.com/arbiter-run/arbiter/replay.") {
				avg := float64(r.InUseBytes()) / float64(r.InUseObjects())
				total += float64(r.InUseBytes()) / (1 - math.Exp(-avg/rate))
				break
			}
			if !more {
				break
			}
		}
	}
	return total
}

// buildStream publishes n events of interleaved 10-step runs and returns
// how many evaluations they hold.
func buildStream(b *testing.B, js jetstream.JetStream, log *events.Log, n int) int {
	b.Helper()
	path := `{"type":"object","properties":{"path":{"type":"string"},"text":{"type":"string"}},"required":["path"]}`
	var specs []events.ToolSpec
	for _, tool := range []driver.Tool{
		testkit.NewLedger("read_file", events.ReadOnly, path),
		testkit.NewLedger("write_file", events.LocalMutation, path),
		testkit.NewLedger("finish", events.ReadOnly, testkit.AnyObject).Terminal(),
	} {
		ct, err := driver.Compile(tool)
		if err != nil {
			b.Fatal(err)
		}
		specs = append(specs, ct.Record)
	}
	const inFlight = 64
	runs := make([]*benchRun, inFlight)
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	made, evals, next := 0, 0, 0
	for i := 0; made < n; i = (i + 1) % inFlight {
		if runs[i] == nil || runs[i].done() {
			runs[i] = &benchRun{id: fmt.Sprintf("bench-%07d", next), specs: specs}
			next++
		}
		r := runs[i]
		ev := r.next(t0.Add(time.Duration(made) * time.Millisecond))
		data, err := ev.Encode()
		if err != nil {
			b.Fatal(err)
		}
		r.prev = events.Hash(data)
		if ev.Kind == events.StepPolicy {
			evals++
		}
		if _, err := js.PublishAsync(log.Subject(ev.Run, ev.Kind), data, jetstream.WithMsgID(ev.ID)); err != nil {
			b.Fatal(err)
		}
		made++
		if made%8192 == 0 {
			waitPublished(b, js)
		}
	}
	waitPublished(b, js)
	return evals
}

func waitPublished(b *testing.B, js jetstream.JetStream) {
	b.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		b.Fatal("async publishes not acknowledged after 30s")
	}
}

// benchRun makes the events of one 10-step run in order: run.created, then
// per step decided, policy (allow) and observed, then run.finished after
// the terminal step.
type benchRun struct {
	id    string
	specs []events.ToolSpec
	seq   uint64
	prev  string
}

const benchSteps = 10

func (r *benchRun) done() bool { return r.seq == 2+3*benchSteps }

func (r *benchRun) next(at time.Time) events.Event {
	r.seq++
	ev := events.Event{V: events.FormatVersion, ID: events.NewID(), Run: r.id, Seq: r.seq, Time: at, Prev: r.prev}
	step := int(r.seq-2)/3 + 1
	spec := r.specs[step%2]
	if step == benchSteps {
		spec = r.specs[2]
	}
	args := fmt.Sprintf(`{"path":"notes-%d.txt","text":"step %d of run %s"}`, step, step, r.id)
	var body any
	switch {
	case r.seq == 1:
		ev.Kind, body = events.RunCreated, events.RunCreatedBody{Tools: r.specs, Limits: driver.DefaultLimits, Agent: "bench", Input: json.RawMessage(`{"goal":"benchmark"}`)}
	case r.seq == 2+3*benchSteps:
		ev.Kind, body = events.RunFinished, events.EndBody{Reason: events.ReasonCompleted, Result: "done"}
	case (r.seq-2)%3 == 0:
		ev.Kind, body = events.StepDecided, events.StepDecidedBody{Step: step, Tool: spec.Name, Args: args}
	case (r.seq-2)%3 == 1:
		ev.Kind, body = events.StepPolicy, events.PolicyBody{
			Step: step, Outcome: "allow", Reason: fmt.Sprintf("%s tool %s", spec.SideEffect, spec.Name),
			PolicyID: benchPolicyID, Args: json.RawMessage(args), ToolHash: spec.Hash,
		}
	default:
		ev.Kind, body = events.StepObserved, events.ObservedBody{Step: step, Kind: events.ObsResult, Content: "ok: wrote 1024 bytes to notes.txt; the file now holds the draft the agent asked for"}
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(err)
	}
	ev.Body = b
	return ev
}
