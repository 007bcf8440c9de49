package faulttest

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// TestWorker_DefaultBuildIgnoresCrashBefore: fault injection is compiled
// only into a worker built with the arbiter_faults tag. The shipped build,
// given ARBITER_CRASH_BEFORE for its very first append of a step, appends it
// and drives the run to its end; the tagged build, given the same, dies by
// SIGKILL before that append and leaves the run untouched.
func TestWorker_DefaultBuildIgnoresCrashBefore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shipped, tagged := shippedWorkerBinary(t), workerBinary(t)
	spec := string(events.StepDecided) + ":1"

	t.Run("shipped", func(t *testing.T) {
		env := newTestProcEnv(t, ctx)
		const run = "shipped-1"
		if err := env.q.Start(ctx, env.d, run, "steps", nil); err != nil {
			t.Fatal(err)
		}
		p, err := env.startWorker(shipped, workerOpts{crashBefore: spec, concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.stop)
		settled := make(chan error, 1)
		go func() { settled <- waitSettled(ctx, env.d, []string{run}, time.Minute) }()
		select {
		case <-p.done:
			t.Fatalf("shipped worker with ARBITER_CRASH_BEFORE=%s: exited (%v), want it to drive the run\n%s", spec, p.err, p.tail(3000))
		case err := <-settled:
			if err != nil {
				t.Fatalf("shipped worker with ARBITER_CRASH_BEFORE=%s: %v\nworker stderr:\n%s", spec, err, p.tail(3000))
			}
		}
		select {
		case <-p.done:
			t.Fatalf("shipped worker with ARBITER_CRASH_BEFORE=%s: exited (%v) after the run, want it still running\n%s", spec, p.err, p.tail(3000))
		default:
		}
		r, err := env.d.Load(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.View().Run.Status; got != projector.Completed {
			t.Errorf("run %s: got status %s, want %s", run, got, projector.Completed)
		}
		if got := countKind(t, env, run, events.StepDecided); got != 4 {
			t.Errorf("run %s: got %d %s events, want 4 (one a step)", run, got, events.StepDecided)
		}
	})

	t.Run("tagged", func(t *testing.T) {
		env := newTestProcEnv(t, ctx)
		const run = "tagged-1"
		if err := env.q.Start(ctx, env.d, run, "steps", nil); err != nil {
			t.Fatal(err)
		}
		p, err := env.startWorker(tagged, workerOpts{crashBefore: spec, concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.stop)
		if err := p.wait(30 * time.Second); !killedBy(err, syscall.SIGKILL) {
			t.Fatalf("tagged worker with ARBITER_CRASH_BEFORE=%s: got %v, want death by SIGKILL\n%s", spec, err, p.tail(3000))
		}
		if got := countKind(t, env, run, events.StepDecided); got != 0 {
			t.Errorf("run %s: got %d %s events, want 0 (the worker died before the first)", run, got, events.StepDecided)
		}
	})
}

// newTestProcEnv is newProcEnv in a temporary directory, closed when the
// test ends.
func newTestProcEnv(t *testing.T, ctx context.Context) *procEnv {
	t.Helper()
	env, err := newProcEnv(ctx, t.TempDir(), events.ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.close)
	return env
}

// countKind counts the events of kind in run.
func countKind(t *testing.T, env *procEnv, run string, kind events.Kind) int {
	t.Helper()
	recs, _, err := env.log.Read(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Event.Kind == kind {
			n++
		}
	}
	return n
}
