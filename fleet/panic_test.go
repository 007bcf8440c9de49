package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/testkit"
)

// bomb panics on any request for the tool "boom", and allows the rest.
type bomb struct{}

func (bomb) Evaluate(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
	if req.Tool.Name == "boom" {
		panic("the policy blew up on " + req.Run)
	}
	return policy.Ruling{Outcome: events.Allow, Reason: "fine"}, nil
}

func (bomb) PolicyID() string { return "bomb v1" }

// TestFleet_PanickingPolicyFailsItsRunAndNoWorker: three workers share a
// fleet; one run's request makes the policy panic (before the fix the panic
// left Driver.Drive and killed every worker process that took the run). The
// run ends failed as internal_error with the panic recorded, nothing of it
// executed, and all three workers go on to drive the other runs to the end.
func TestFleet_PanickingPolicyFailsItsRunAndNoWorker(t *testing.T) {
	f := newApprovalFleet(t, 0)
	boomTool := testkit.NewLedger("boom", events.RemoteMutation, sendSchema)
	f.cfg.Policy = bomb{}
	f.cfg.Tools = append(f.cfg.Tools, boomTool)
	d, q, _ := f.member(t)

	// Three workers, each counting the runs it asks its agent about.
	var drove [3]atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range drove {
		wd, wq, ws := f.member(t)
		agent := driver.AgentFunc(func(ctx context.Context, in driver.StepInput) (driver.Action, error) {
			drove[i].Add(1)
			if in.Run.Agent == "bomb" {
				return scripted.Call("boom", `{"to":"x"}`), nil
			}
			return scripted.Call("done", `{}`), nil
		})
		w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: wd, Queue: wq, Snapshots: ws, Agents: map[string]driver.Agent{"": agent}, Concurrency: 1})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })

	if err := q.Start(t.Context(), d, "run-bomb", "bomb", nil); err != nil {
		t.Fatal(err)
	}
	v := waitFor(t, d, "run-bomb", 20*time.Second, "ended", func(v projector.View) bool { return v.Run.Status.Ended() })
	if v.Run.Status != projector.Failed || v.Run.Reason != string(events.ReasonInternalError) || !strings.Contains(v.Run.Detail, "panicked: the policy blew up on run-bomb") {
		t.Fatalf("run-bomb ended %s %s %q, want FAILED internal_error with the panic", v.Run.Status, v.Run.Reason, v.Run.Detail)
	}
	if got := boomTool.Count(); got != 0 {
		t.Errorf("boom executed for the panicking run: %d times, want 0", got)
	}
	recs := mustRead(t, d, "run-bomb")
	body, err := events.DecodeBody[events.EndBody](recs[len(recs)-1].Event)
	if err != nil || body.Policy == nil || body.Policy.Outcome != events.OutcomeError || body.Policy.PolicyID != "bomb v1" {
		t.Errorf("end of run-bomb: %+v, %v; want the failed evaluation recorded with the policy's id", body, err)
	}

	// Every worker is alive: runs are started until each of the three has
	// driven one after the panic (bounded: at most 60 runs).
	var before [3]int64
	for i := range drove {
		before[i] = drove[i].Load()
	}
	alive := func() bool {
		for i := range drove {
			if drove[i].Load() == before[i] {
				return false
			}
		}
		return true
	}
	for i := 0; i < 60 && !alive(); i++ {
		run := fmt.Sprintf("run-after-%d", i)
		if err := q.Start(t.Context(), d, run, "ok", nil); err != nil {
			t.Fatal(err)
		}
		waitFor(t, d, run, 20*time.Second, "completed", func(v projector.View) bool { return v.Run.Status == projector.Completed })
	}
	if !alive() {
		t.Fatalf("runs driven by each worker since the panic: %d, %d, %d; want every worker to drive one", drove[0].Load()-before[0], drove[1].Load()-before[1], drove[2].Load()-before[2])
	}
}

func mustRead(t *testing.T, d *driver.Driver, run string) []events.Record {
	t.Helper()
	recs, _, err := d.Log().Read(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}
