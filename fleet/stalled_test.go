package fleet_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestWorker_RunThatCannotBeAppendedToIsShownStalled: when the server goes
// away while a worker's agent decides, the decision cannot be recorded:
// the worker lists the run as stalled (what /healthz prints) and counts it
// in arbiter_runs_stalled, instead of dropping it silently.
func TestWorker_RunThatCannotBeAppendedToIsShownStalled(t *testing.T) {
	f := newApprovalFleet(t, 0)
	d, q, _ := f.member(t)
	wd, wq, ws := f.member(t)
	metrics := fleet.NewMetrics(prometheus.NewRegistry())
	agent := driver.AgentFunc(func(context.Context, driver.StepInput) (driver.Action, error) {
		f.js.Server.Shutdown() // the log goes away while the model thinks
		return scripted.Call("done", `{}`), nil
	})
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: wd, Queue: wq, Snapshots: ws, Agents: map[string]driver.Agent{"": agent}, Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(t.Context(), d, "run-stalled", "script", nil); err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	for deadline := time.Now().Add(20 * time.Second); !slices.Equal(w.Stalled(), []string{"run-stalled"}); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stalled runs %v, want run-stalled", w.Stalled())
		}
	}
	var m dto.Metric
	if err := metrics.RunsStalled.Write(&m); err != nil || m.GetGauge().GetValue() != 1 {
		t.Errorf("arbiter_runs_stalled = %v (%v), want 1", m.GetGauge().GetValue(), err)
	}
}
