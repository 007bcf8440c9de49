package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// pureAgent is a Pure agent that calls read_file until step n, then the
// terminal tool, and notes each call in its log; onDecide, when set, runs
// inside Decide.
type pureAgent struct {
	n        int
	mu       *sync.Mutex // guards *log, which others may note in too
	log      *[]string
	onDecide func(in driver.StepInput)
}

func (a *pureAgent) Pure() {}

func (a *pureAgent) Decide(ctx context.Context, in driver.StepInput) (driver.Action, error) {
	step := in.Steps.Len() + 1
	a.mu.Lock()
	*a.log = append(*a.log, fmt.Sprintf("decide %d", step))
	a.mu.Unlock()
	if a.onDecide != nil {
		a.onDecide(in)
	}
	if step >= a.n {
		return testkit.Call("done", `{}`), nil
	}
	return testkit.Call("read_file", fmt.Sprintf(`{"path":"f%d"}`, step)), nil
}

// TestDriver_PureAgentIsAskedWhileTheObservationIsStored: a Pure agent is
// asked for step n+1 before step n's observation is acknowledged (its
// OnAppend comes after), once a step, and the run records what a plain
// agent's run records: the same kinds, decisions and results.
func TestDriver_PureAgentIsAskedWhileTheObservationIsStored(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	var seq []string
	var mu sync.Mutex
	note := func(s string) { mu.Lock(); seq = append(seq, s); mu.Unlock() }
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	d := newDriverCfg(t, driver.Config{
		Log: log, Policy: allowAll, Tools: []driver.Tool{read, done()},
		OnAppend: func(k events.Kind, body any, _ time.Duration, err error) {
			if o, ok := body.(events.ObservedBody); ok && k == events.StepObserved && err == nil {
				note(fmt.Sprintf("stored observation %d", o.Step))
			}
			if e, ok := body.(events.EndBody); ok && e.Observation != nil && err == nil {
				note(fmt.Sprintf("stored end with observation %d", e.Observation.Step))
			}
		},
	})
	r := create(t, d, "pure")
	if err := d.Drive(t.Context(), r, &pureAgent{n: 4, mu: &mu, log: &seq}); err != nil {
		t.Fatal(err)
	}
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
	want := []string{"decide 1", "decide 2", "stored observation 1", "decide 3", "stored observation 2", "decide 4", "stored observation 3", "stored end with observation 4"}
	if !slices.Equal(seq, want) {
		t.Errorf("order: got %q, want %q (each decision asked before the observation before it was stored, once)", seq, want)
	}
	wantCount(t, read, 3)

	// A plain agent with the same answers records the same run.
	plain := testkit.NewScript(testkit.Call("read_file", `{"path":"f1"}`), testkit.Call("read_file", `{"path":"f2"}`), testkit.Call("read_file", `{"path":"f3"}`), testkit.Call("done", `{}`))
	d2 := newDriver(t, log, allowAll, testkit.NewLedger("read_file", events.ReadOnly, pathSchema), done())
	r2 := create(t, d2, "plain")
	drive(t, d2, r2, plain)
	a, b := records(t, log, "pure"), records(t, log, "plain")
	if !slices.Equal(kinds(a), kinds(b)) {
		t.Fatalf("kinds: pure %v, plain %v", kinds(a), kinds(b))
	}
	for i := range a {
		pa, pok, _ := events.PolicyResult(a[i].Event)
		pb, bok, _ := events.PolicyResult(b[i].Event)
		if pok != bok || pa.Outcome != pb.Outcome || string(pa.Args) != string(pb.Args) {
			t.Errorf("event %d: pure %+v, plain %+v", i+1, pa, pb)
		}
	}
}

// TestDriver_PureAgentsAnswerIsDroppedWhenTheRunMovedOn: another writer
// moves the run on while a pure agent is asked ahead (the observation
// before it in flight): the decision asked ahead is never recorded, nothing
// runs for it, and the run, reloaded, goes on from what the log holds.
func TestDriver_PureAgentsAnswerIsDroppedWhenTheRunMovedOn(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	d := newDriver(t, log, allowAll, read, done())
	r := create(t, d, "moved")
	var notes []string
	intruded := false
	a := &pureAgent{n: 3, mu: &sync.Mutex{}, log: &notes}
	a.onDecide = func(in driver.StepInput) {
		if in.Steps.Len() == 1 && !intruded {
			// Asked ahead for step 2: step 1's observation is being
			// stored. Wait until it is, then move the run on.
			intruded = true
			waitForKind(t, log, "moved", events.StepObserved)
			appendEvent(t, log, "moved", events.ApprovalRefused, events.RefusedBody{Approval: "none", Intake: 1, Reason: "no such approval"})
		}
	}
	err := d.Drive(t.Context(), r, a)
	if !errors.Is(err, events.ErrConflict) {
		t.Fatalf("Drive: got %v, want an error wrapping events.ErrConflict", err)
	}
	recs := records(t, log, "moved")
	if got, want := kinds(recs), []events.Kind{events.RunCreated, events.StepDecided, events.StepObserved, events.ApprovalRefused}; !slices.Equal(got, want) {
		t.Fatalf("events: got %v, want %v (nothing of the decision asked ahead)", got, want)
	}
	wantCount(t, read, 1)
	r = load(t, d, "moved")
	if err := d.Drive(t.Context(), r, a); err != nil {
		t.Fatal(err)
	}
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
	wantCount(t, read, 2)
}

// TestDriver_PolicyNeverDecidesOnASnapshot: a run loaded from a snapshot
// that lies (its view says another input) drives on: the agent may be shown
// the snapshot, but the policy is asked on the view folded from the run's
// events, with a plain agent and with a pure one asked ahead.
func TestDriver_PolicyNeverDecidesOnASnapshot(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	var seen []string
	watch := policyFunc(func(_ context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
		seen = append(seen, string(v.Run.Input))
		return policy.Ruling{Outcome: events.Allow}, nil
	})
	d := newDriver(t, log, watch, read, done())
	for i, agent := range []driver.Agent{
		testkit.NewScript(testkit.Call("read_file", `{"path":"a"}`), testkit.Call("read_file", `{"path":"b"}`), testkit.Call("done", `{}`)),
		&pureAgent{n: 3, mu: &sync.Mutex{}, log: new([]string)},
	} {
		id := fmt.Sprintf("lied-%d", i)
		if _, err := d.Create(t.Context(), id, "scripted", json.RawMessage(`"the real task"`)); err != nil {
			t.Fatal(err)
		}
		// One step recorded, then a snapshot of it that lies.
		r := load(t, d, id)
		stop := make(chan struct{})
		var once sync.Once
		one := driver.AgentFunc(func(ctx context.Context, in driver.StepInput) (driver.Action, error) {
			once.Do(func() { close(stop) })
			return agent.Decide(ctx, in)
		})
		_ = d.DriveUntil(t.Context(), r, one, stop)
		snap, at := r.View(), r.Tail()
		snap.Run.Input = json.RawMessage(`"a forged task"`)
		seen = nil
		lied, err := d.LoadFrom(t.Context(), id, snap, at)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Drive(t.Context(), lied, agent); err != nil {
			t.Fatal(err)
		}
		wantEnd(t, lied.View(), projector.Completed, events.ReasonCompleted)
		if len(seen) == 0 {
			t.Fatalf("%T: the policy was never asked after the load", agent)
		}
		for k, in := range seen {
			if in != `"the real task"` {
				t.Errorf("%T: evaluation %d after the load saw input %s, want the recorded one", agent, k+1, in)
			}
		}
	}
}
