package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
)

// BenchmarkAsk is one allowed read-only call through the gate, in one run
// of b.N calls each way, two ways: asked and reported ([gate.Run.Ask],
// then [gate.Run.Report], the program running the call between them) and
// in one [gate.Run.Call] (the call run on the caller's goroutine, as the
// gateway does), against the two fenced appends a call records
// (step.decided carrying its allow, step.observed) made beside them on the
// same server. Which goes first rotates, so all see the same load. It
// reports the medians, their ratios, and the median of the last tenth of
// the calls against the first tenth (the cost must not grow with the run).
func BenchmarkAsk(b *testing.B) {
	e, g := benchGate(b)
	ctx := context.Background()
	asked, err := g.Open(ctx, "bench-ask", "program", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer asked.Close()
	called, err := g.Open(ctx, "bench-call", "program", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer called.Close()
	tail := appendEvent(b, e.log, events.Tail{}, events.RunCreated, events.RunCreatedBody{Agent: "bench"})
	run := func(_ context.Context, _ json.RawMessage) (string, error) { return "ok", nil }
	var asks, calls, twos []time.Duration
	i := 0
	for b.Loop() {
		args := json.RawMessage(fmt.Sprintf(`{"path":"%d"}`, i))
		parts := []func(){
			func() {
				t0 := time.Now()
				a, err := asked.Ask(ctx, "read", args)
				if err != nil || a.Verdict != gate.Allow {
					b.Fatalf("ask: %+v, %v", a, err)
				}
				if _, err := asked.Report(ctx, "ok", nil); err != nil {
					b.Fatal(err)
				}
				asks = append(asks, time.Since(t0))
			},
			func() {
				t0 := time.Now()
				a, err := called.Call(ctx, "read", args, run)
				if err != nil || a.Verdict != gate.Done {
					b.Fatalf("call: %+v, %v", a, err)
				}
				calls = append(calls, time.Since(t0))
			},
			func() {
				t0 := time.Now()
				for range 2 {
					tail = appendEvent(b, e.log, tail, events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "ok"})
				}
				twos = append(twos, time.Since(t0))
			},
		}
		for k := range parts {
			parts[(i+k)%len(parts)]()
		}
		i++
	}
	ak, c, a := median(asks), median(calls), median(twos)
	b.ReportMetric(float64(ak.Microseconds()), "ask-p50-µs")
	b.ReportMetric(float64(c.Microseconds()), "call-p50-µs")
	b.ReportMetric(float64(a.Microseconds()), "2appends-p50-µs")
	b.ReportMetric(float64(ak)/float64(a), "ask/2appends")
	b.ReportMetric(float64(c)/float64(a), "call/2appends")
	if n := len(calls) / 10; n >= 10 {
		b.ReportMetric(float64(median(asks[len(asks)-n:]))/float64(median(asks[:n])), "ask-last/first-tenth")
		b.ReportMetric(float64(median(calls[len(calls)-n:]))/float64(median(calls[:n])), "call-last/first-tenth")
	}
}

// BenchmarkCallAfterIdle is [gate.Run.Call] as the gateway makes it: the
// process idle before the call (the host's request on its way) and while
// the call runs (the upstream server working), here a sleep of idle each
// time. It times the call without its function, against two fenced
// appends each made after the same idle: what a call's two appends cost
// in a process that was waiting ("cold"), with the call's own work beside
// them. The sleeps are not timed.
func BenchmarkCallAfterIdle(b *testing.B) {
	const idle = 300 * time.Microsecond
	e, g := benchGate(b)
	ctx := context.Background()
	called, err := g.Open(ctx, "bench-call", "program", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer called.Close()
	tail := appendEvent(b, e.log, events.Tail{}, events.RunCreated, events.RunCreatedBody{Agent: "bench"})
	var ran time.Duration
	run := func(_ context.Context, _ json.RawMessage) (string, error) {
		t0 := time.Now()
		time.Sleep(idle)
		ran = time.Since(t0)
		return "ok", nil
	}
	var calls, twos []time.Duration
	i := 0
	for b.Loop() {
		args := json.RawMessage(fmt.Sprintf(`{"path":"%d"}`, i))
		parts := []func(){
			func() {
				time.Sleep(idle)
				t0 := time.Now()
				a, err := called.Call(ctx, "read", args, run)
				if err != nil || a.Verdict != gate.Done {
					b.Fatalf("call: %+v, %v", a, err)
				}
				calls = append(calls, time.Since(t0)-ran)
			},
			func() {
				var d time.Duration
				for range 2 {
					time.Sleep(idle)
					t0 := time.Now()
					tail = appendEvent(b, e.log, tail, events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "ok"})
					d += time.Since(t0)
				}
				twos = append(twos, d)
			},
		}
		for k := range parts {
			parts[(i+k)%len(parts)]()
		}
		i++
	}
	c, a := median(calls), median(twos)
	b.ReportMetric(float64(c.Microseconds()), "call-p50-µs")
	b.ReportMetric(float64(a.Microseconds()), "2cold-appends-p50-µs")
	b.ReportMetric(float64(c)/float64(a), "call/2cold-appends")
}

// BenchmarkCallAllocs is [gate.Run.Call] as the gateway's handler makes
// it, each on a goroutine of its own with a context of its own (the go-sdk
// starts one per request, with a context its cancellation ends),
// b.N calls in one run, for its allocations: B/op and allocs/op count
// everything the process allocates meanwhile, the embedded server's work
// on the call's two appends included. Run with -benchtime 2000x and again
// with a longer run (60000x): what a call allocates must not grow with
// the run's length.
func BenchmarkCallAllocs(b *testing.B) {
	_, g := benchGate(b)
	ctx := context.Background()
	called, err := g.Open(ctx, "bench-call", "program", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer called.Close()
	run := func(_ context.Context, _ json.RawMessage) (string, error) { return "ok", nil }
	done := make(chan error)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		args := json.RawMessage(fmt.Sprintf(`{"path":"%d"}`, i))
		go func() {
			// A context of its own, as the go-sdk gives each request.
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			a, err := called.Call(rctx, "read", args, run)
			if err == nil && a.Verdict != gate.Done {
				err = fmt.Errorf("call: %+v", a)
			}
			done <- err
		}()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func appendEvent(b *testing.B, log *events.Log, tail events.Tail, k events.Kind, body any) events.Tail {
	ev, err := events.New("bench-appends", k, body)
	if err != nil {
		b.Fatal(err)
	}
	tail, err = log.Append(context.Background(), tail, ev)
	if err != nil {
		b.Fatal(err)
	}
	return tail
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// benchGate is a gate on an embedded server whose runs may take as many
// steps as a benchmark makes.
func benchGate(b *testing.B) (*env, *gate.Gate) {
	b.Helper()
	e := newEnvB(b)
	e.cfg.Limits = events.Limits{MaxSteps: 1 << 30, MaxRepeats: 1 << 30}
	g, err := gate.New(e.cfg)
	if err != nil {
		b.Fatal(err)
	}
	return e, g
}
