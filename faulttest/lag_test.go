package faulttest

import (
	"context"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestWorker_NudgeForRunNotYetReadableIsKept is the cluster test's rare
// failure made deterministic: right after a leader change, a replica that is
// not yet current can answer a worker's read of a run without its events
// (the worker saw "no such run", or "1 events missing" when the tail named
// an event the batch read did not return) and the worker terminated the
// run's only nudge, stranding the run. Here the nudge is handled while the
// run has no events, and the events appear afterwards, with no new nudge:
// the worker must look again and drive the run to its end.
func TestWorker_NudgeForRunNotYetReadableIsKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	q, snaps, err := fleet.Setup(ctx, js.JS, fleet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	d, err := driver.New(driver.Config{Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "lag"), Tools: []driver.Tool{done}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: q, Snapshots: snaps, Agents: map[string]driver.Agent{"lag": testkit.NewScript(testkit.Call("done", `{}`))}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { _ = w.Run(wctx); close(stopped) }()
	t.Cleanup(func() { stop(); <-stopped })

	const run = "lagging"
	if err := q.Nudge(ctx, run, "created"); err != nil {
		t.Fatal(err)
	}
	// Wait until the worker has taken the nudge and found no run: the nudge
	// is then terminated (no longer pending), or handed back for later
	// (still pending, so give the worker 500 ms, a hundred times what a
	// failed load takes).
	cons, err := js.JS.Consumer(ctx, q.Config().WorkStream, q.Config().Consumer)
	if err != nil {
		t.Fatal(err)
	}
	var taken time.Time
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Delivered.Consumer >= 1 && taken.IsZero() {
			taken = time.Now()
		}
		if !taken.IsZero() && (info.NumAckPending == 0 || time.Since(taken) > 500*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker did not take the nudge in 10s: %+v", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The run's events become readable now; nobody nudges again.
	if _, err := d.Create(ctx, run, "lag", nil); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		r, err := d.Load(ctx, run)
		if err == nil && r.View().Run.Status == projector.Completed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s not completed 20s after its events appeared: the worker gave its only nudge up%s", run, trace(ctx, log, run))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := done.Count(); got != 1 {
		t.Errorf("done executed %d times, want 1", got)
	}
}
