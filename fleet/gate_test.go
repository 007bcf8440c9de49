package fleet_test

import (
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/scripted"
)

// TestFleet_WorkersLeaveGateRunsAlone: a run whose agent is a gate's
// (gate:<actor>) is driven by the program that opened it; a worker nudged
// for it (as arbiter grant nudges) acks the nudge and records nothing, even
// one with a default agent that would drive any other run.
func TestFleet_WorkersLeaveGateRunsAlone(t *testing.T) {
	f := newApprovalFleet(t, 0)
	d, q, _ := f.member(t)
	r, err := d.Create(t.Context(), "run-gate", fleet.GateAgentPrefix+"ana", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := r.Tail()
	wd, wq, ws := f.member(t)
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: wd, Queue: wq, Snapshots: ws, Agents: map[string]driver.Agent{
		"": scripted.Agent{Decisions: []driver.Action{scripted.Call("done", `{}`)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	if err := q.Nudge(t.Context(), "run-gate", "granted"); err != nil {
		t.Fatal(err)
	}
	cons, err := f.js.JS.Consumer(t.Context(), "ARB_WORK", "arb-workers")
	if err != nil {
		t.Fatal(err)
	}
	// The nudge taken and acked is the proof the worker looked at the run.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info, err := cons.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.Delivered.Consumer >= 1 && info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the nudge was not settled: %+v", info)
		}
	}
	if tail, err := d.Log().Tail(t.Context(), "run-gate"); err != nil || tail != before {
		t.Errorf("gate run after the nudge: tail %+v, %v; want it untouched at %+v", tail, err, before)
	}
}
