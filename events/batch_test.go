package events_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestRead_InterleavedRunsInBatches: runs written round-robin read back
// whole, each in order and alone, through batch reads of exactly their
// events; a tail past the stored events is a broken chain, not a hang.
func TestRead_InterleavedRunsInBatches(t *testing.T) {
	const runs, per = 5, 40
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	tails := make([]events.Tail, runs)
	for i := range tails {
		tails[i] = startRun(t, ctx, l, fmt.Sprintf("r%d", i))
	}
	for n := 1; n < per; n++ {
		for i := range tails {
			run := fmt.Sprintf("r%d", i)
			tail, err := l.Append(ctx, tails[i], mustEvent(t, run, events.StepDecided, events.StepDecidedBody{Step: n, Tool: run}))
			if err != nil {
				t.Fatal(err)
			}
			tails[i] = tail
		}
	}
	for i := range tails {
		run := fmt.Sprintf("r%d", i)
		recs, tail, err := l.Read(ctx, run)
		if err != nil {
			t.Fatalf("read %s: %v", run, err)
		}
		if len(recs) != per || tail != tails[i] {
			t.Fatalf("read %s: %d events, tail %+v; want %d, %+v", run, len(recs), tail, per, tails[i])
		}
		for k, rec := range recs {
			if rec.Event.Run != run || rec.Event.Seq != uint64(k+1) {
				t.Fatalf("read %s: event %d is run %s position %d", run, k, rec.Event.Run, rec.Event.Seq)
			}
		}
		// From the middle, as a snapshot would.
		mid := recs[per/2-1].Tail()
		after, _, err := l.Since(ctx, run, mid)
		if err != nil || len(after) != per/2 {
			t.Fatalf("read %s after %d: %d events, %v; want %d", run, mid.Count, len(after), err, per/2)
		}
	}
	// A tail that claims more events than are stored.
	beyond := tails[0]
	beyond.Count += 3
	if _, _, err := l.Since(ctx, "r0", beyond); !errors.Is(err, events.ErrBrokenChain) {
		t.Fatalf("read past the stored events: got %v, want ErrBrokenChain", err)
	}
}

// TestRead_NoStream: a batch read from a stream that is gone is an error.
func TestRead_NoStream(t *testing.T) {
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	t0 := startRun(t, ctx, l, "r")
	if _, err := l.Append(ctx, t0, mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "x"})); err != nil {
		t.Fatal(err)
	}
	if err := env.JS.DeleteStream(ctx, l.StreamName(0)); err != nil {
		t.Fatal(err)
	}
	// Gone is not broken: the run is not refused for good.
	if _, _, err := l.Read(ctx, "r"); err == nil || errors.Is(err, events.ErrBrokenChain) || errors.Is(err, events.ErrNoRun) {
		t.Fatalf("read with no stream: got %v, want a transport error (not a broken chain, not no run)", err)
	}
}

// TestRead_LongRunInSeveralBatches: a run longer than one batch read (1,024
// events) reads back whole and in order.
func TestRead_LongRunInSeveralBatches(t *testing.T) {
	const n = 1100
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	tail := startRun(t, ctx, l, "long")
	for i := 1; i < n; i++ {
		var err error
		if tail, err = l.Append(ctx, tail, mustEvent(t, "long", events.StepDecided, events.StepDecidedBody{Step: i, Tool: "x"})); err != nil {
			t.Fatal(err)
		}
	}
	recs, got, err := l.Read(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n || got != tail {
		t.Fatalf("read a run of %d: %d events, tail %+v, want %+v", n, len(recs), got, tail)
	}
	for i, r := range recs {
		if r.Event.Seq != uint64(i+1) {
			t.Fatalf("event %d at position %d", i, r.Event.Seq)
		}
	}
}
