package events_test

import (
	"context"
	"errors"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestRead_RollbackByUnfencedCopyIsBroken: a copy of an earlier event (a
// new id, its original position and prev) published without the fence
// after the run's tail would, if believed, make a reader fold a shorter
// history (issue 10, item 1). Read, and Since from any tail the run had,
// refuse the run as a broken chain instead of folding a prefix; so does a
// read of a run where two events claim one position anywhere.
func TestRead_RollbackByUnfencedCopyIsBroken(t *testing.T) {
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	tails := fiveEvents(t, ctx, l, "r")
	recs, _, err := l.Read(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	// Position 3 again, chained where the original was, with a fresh id.
	copied := recs[2].Event
	copied.ID = events.NewID()
	data, err := copied.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.Publish(ctx, l.Subject("r", copied.Kind), data); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Read(ctx, "r"); !errors.Is(err, events.ErrBrokenChain) {
		t.Fatalf("read after a rollback copy: got %v, want ErrBrokenChain", err)
	}
	for i, from := range tails {
		if _, _, err := l.Since(ctx, "r", from); !errors.Is(err, events.ErrBrokenChain) {
			t.Errorf("since tail %d after a rollback copy: got %v, want ErrBrokenChain", i, err)
		}
	}
}

// TestRead_ForkedPositionIsBroken: a message claiming the position right
// after the tail is read as the run's next event only if nothing claims it
// already; a second event at one position (here the next one, twice) is
// broken, however it chains.
func TestRead_ForkedPositionIsBroken(t *testing.T) {
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	t0 := startRun(t, ctx, l, "r")
	t1, err := l.Append(ctx, t0, mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1}))
	if err != nil {
		t.Fatal(err)
	}
	recs, _, err := l.Read(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	fork := recs[1].Event
	fork.ID = events.NewID()
	fork.Body = []byte(`{"step":1,"tool":"other"}`)
	data, err := fork.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.JS.Publish(ctx, l.Subject("r", fork.Kind), data); err != nil {
		t.Fatal(err)
	}
	for name, from := range map[string]events.Tail{"start": {}, "first": t0, "tail": t1} {
		if _, _, err := l.Since(ctx, "r", from); !errors.Is(err, events.ErrBrokenChain) {
			t.Errorf("since %s with two events at position 2: got %v, want ErrBrokenChain", name, err)
		}
	}
}

// TestRead_TailOnAnotherKindsSubjectIsBroken: an event stored on a subject
// its kind does not belong on (a decision smuggled as a run.finished) is
// not believed as the run's tail, whether a read comes from the start or
// from a snapshot's tail naming that very message.
func TestRead_TailOnAnotherKindsSubjectIsBroken(t *testing.T) {
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	t0 := startRun(t, ctx, l, "r")
	ev := mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1})
	ev.Seq, ev.Prev, ev.V = t0.Count+1, t0.Hash, events.FormatVersion
	data, err := ev.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ack, err := env.JS.Publish(ctx, l.Subject("r", events.RunFinished), data)
	if err != nil {
		t.Fatal(err)
	}
	smuggled := events.Tail{Seq: ack.Sequence, Count: ev.Seq, Hash: events.Hash(data)}
	for name, from := range map[string]events.Tail{"start": {}, "first": t0, "the smuggled tail": smuggled} {
		if _, _, err := l.Since(ctx, "r", from); !errors.Is(err, events.ErrBrokenChain) {
			t.Errorf("since %s: got %v, want ErrBrokenChain", name, err)
		}
	}
}

// fiveEvents appends run's creation and four decisions to l, and returns
// the run's tail after each (tails[i] is the tail at position i+1).
func fiveEvents(t *testing.T, ctx context.Context, l *events.Log, run string) []events.Tail {
	t.Helper()
	tails := []events.Tail{startRun(t, ctx, l, run)}
	for i := 1; i <= 4; i++ {
		nt, err := l.Append(ctx, tails[len(tails)-1], mustEvent(t, run, events.StepDecided, events.StepDecidedBody{Step: i}))
		if err != nil {
			t.Fatal(err)
		}
		tails = append(tails, nt)
	}
	return tails
}
