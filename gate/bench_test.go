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

// BenchmarkAsk is one allowed call through the gate, asked and reported,
// in one run of b.N calls, against the three fenced appends it records
// (step.decided, step.policy, step.observed) made beside it on the same
// server, alternating. It reports the medians and their ratio, and the
// median of the last tenth of the calls against the first tenth (the cost
// must not grow with the run).
func BenchmarkAsk(b *testing.B) {
	e := newEnvB(b)
	e.cfg.Limits = events.Limits{MaxSteps: 1 << 30, MaxRepeats: 1 << 30}
	g, err := gate.New(e.cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	r, err := g.Open(ctx, "bench", "program", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	tail := appendEvent(b, e.log, events.Tail{}, events.RunCreated, events.RunCreatedBody{Agent: "bench"})
	var calls, threes []time.Duration
	i := 0
	for b.Loop() {
		t0 := time.Now()
		a, err := r.Ask(ctx, "read", json.RawMessage(fmt.Sprintf(`{"path":"%d"}`, i)))
		if err != nil || a.Verdict != gate.Allow {
			b.Fatalf("ask: %+v, %v", a, err)
		}
		if _, err := r.Report(ctx, "ok", nil); err != nil {
			b.Fatal(err)
		}
		calls = append(calls, time.Since(t0))
		t0 = time.Now()
		for range 3 {
			tail = appendEvent(b, e.log, tail, events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "ok"})
		}
		threes = append(threes, time.Since(t0))
		i++
	}
	c, a := median(calls), median(threes)
	b.ReportMetric(float64(c.Microseconds()), "call-p50-µs")
	b.ReportMetric(float64(a.Microseconds()), "3appends-p50-µs")
	b.ReportMetric(float64(c)/float64(a), "call/3appends")
	if n := len(calls) / 10; n >= 10 {
		b.ReportMetric(float64(median(calls[len(calls)-n:]))/float64(median(calls[:n])), "last/first-tenth")
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
