package fleet_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/scripted"
)

// TestFleet_RunWithAnAgentNobodyOffersFailsVisibly: a run whose agent no
// worker offers (started around `arbiter start`'s check) used to sit
// RUNNING with no step for ever while a worker logged every 5 s. Now the
// worker that finds it, seeing no live worker offer the agent, fails it
// with reason no_agent and the agents that are offered (issue 10, item 8).
func TestFleet_RunWithAnAgentNobodyOffersFailsVisibly(t *testing.T) {
	f := newApprovalFleet(t, 0)
	d, q, _ := f.member(t)
	wd, wq, ws := f.member(t)
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: wd, Queue: wq, Snapshots: ws, Agents: map[string]driver.Agent{
		"demo": scripted.Agent{Decisions: []driver.Action{scripted.Call("done", `{}`)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	if err := q.Start(t.Context(), d, "run-nosuch", "nosuch", nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Start(t.Context(), d, "run-demo", "demo", nil); err != nil {
		t.Fatal(err)
	}
	v := waitFor(t, d, "run-nosuch", 30*time.Second, "ended", func(v projector.View) bool { return v.Run.Status.Ended() })
	if v.Run.Status != projector.Failed || v.Run.Reason != string(events.ReasonNoAgent) || !strings.Contains(v.Run.Detail, `no worker offers agent "nosuch" (offered: demo)`) {
		t.Errorf("run-nosuch ended %s %s %q, want FAILED no_agent naming the offered agents", v.Run.Status, v.Run.Reason, v.Run.Detail)
	}
	waitFor(t, d, "run-demo", 30*time.Second, "completed", func(v projector.View) bool { return v.Run.Status == projector.Completed })
}

// runWorker runs w until the test ends.
func runWorker(t *testing.T, w *fleet.Worker) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}
