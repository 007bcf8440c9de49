package driver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestDriver_FinalAnswerEndsRunWithResult: a decision with Final ends the
// run completed, with the answer as its result, after the steps before it.
func TestDriver_FinalAnswerEndsRunWithResult(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	d := newDriver(t, log, allowAll, read)
	agent := driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
		if in.Steps.Len() == 0 {
			return driver.Action{Tool: "read_file", Args: []byte(`{"path":"a"}`)}, nil
		}
		return driver.Action{Tool: "ignored", Final: &driver.Answer{Text: "the file says hello"}}, nil
	})
	r := create(t, d, "r1")
	drive(t, d, r, agent)
	v := load(t, d, "r1").View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	if v.Run.Result != "the file says hello" || v.Run.Steps != 1 {
		t.Errorf("got result %q after %d steps, want %q after 1", v.Run.Result, v.Run.Steps, "the file says hello")
	}
	wantCount(t, read, 1)
}

// TestDriver_AgentEndError: an EndError's reason ends the run when it is
// one an agent may give; any other is recorded as agent_error.
func TestDriver_AgentEndError(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	d := newDriver(t, log, allowAll, done())
	cases := []struct {
		run          string
		reason, want events.EndReason
	}{
		{"r1", events.ReasonBudgetExceeded, events.ReasonBudgetExceeded},
		{"r2", events.ReasonCompleted, events.ReasonAgentError},
	}
	for _, c := range cases {
		agent := driver.AgentFunc(func(context.Context, driver.StepInput) (driver.Action, error) {
			return driver.Action{}, &driver.EndError{Reason: c.reason, Detail: "over"}
		})
		r := create(t, d, c.run)
		drive(t, d, r, agent)
		wantEnd(t, load(t, d, c.run).View(), projector.Failed, c.want)
	}
}

// TestDriver_AgentRecordsModelEvents: what an agent records is on the
// run, folded into the view the decision is judged on, and an agent may
// record only model events.
func TestDriver_AgentRecordsModelEvents(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	d := newDriver(t, log, allowAll, done())
	var refused error
	agent := driver.AgentFunc(func(ctx context.Context, in driver.StepInput) (driver.Action, error) {
		refused = in.Record(ctx, events.RunFinished, events.EndBody{Reason: events.ReasonCompleted, Result: "forged"})
		a := events.ModelAttemptBody{Call: 1, Attempt: 1, Provider: "p", Model: "m", Reserve: events.ModelUsage{Calls: 1}, SideEffect: events.SideEffectNone}
		if err := in.Record(ctx, events.ModelAttempted, a); err != nil {
			return driver.Action{}, err
		}
		rep := events.ModelReplyBody{Call: 1, Attempt: 1, Finish: "tool_calls", Usage: events.ModelUsage{Calls: 1, InputTokens: 9}}
		if err := in.Record(ctx, events.ModelReplied, rep); err != nil {
			return driver.Action{}, err
		}
		return driver.Action{Tool: "done", Args: []byte(`{}`)}, nil
	})
	r := create(t, d, "r1")
	drive(t, d, r, agent)
	if !errors.Is(refused, driver.ErrNotModelEvent) {
		t.Errorf("recording run.finished: got %v, want ErrNotModelEvent", refused)
	}
	recs := records(t, log, "r1")
	got := kinds(recs)
	// The terminal tool's result travels in the run's end (ADR 0017).
	want := []events.Kind{events.RunCreated, events.ModelAttempted, events.ModelReplied, events.StepDecided, events.RunFinished}
	if len(got) != len(want) {
		t.Fatalf("got kinds %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got kinds %v, want %v", got, want)
		}
	}
	v := load(t, d, "r1").View()
	if v.Model.Used.InputTokens != 9 || v.Model.Replies != 1 {
		t.Errorf("model totals %+v, want 9 input tokens in 1 reply", v.Model)
	}
}

// TestDriver_AgentRecordConflictDropsRun: when another writer moved the
// run while the agent decided, its record is refused and the driver
// returns ErrConflict without recording the decision.
func TestDriver_AgentRecordConflictDropsRun(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	d := newDriver(t, log, allowAll, done())
	r := create(t, d, "r1")
	agent := driver.AgentFunc(func(ctx context.Context, in driver.StepInput) (driver.Action, error) {
		appendEvent(t, log, "r1", events.ModelAttempted, events.ModelAttemptBody{Call: 1, Attempt: 1, SideEffect: events.SideEffectNone})
		err := in.Record(ctx, events.ModelAttempted, events.ModelAttemptBody{Call: 1, Attempt: 1, SideEffect: events.SideEffectNone})
		return driver.Action{Tool: "done", Args: []byte(`{}`)}, err
	})
	err := d.Drive(t.Context(), r, agent)
	if !errors.Is(err, events.ErrConflict) {
		t.Fatalf("got %v, want ErrConflict", err)
	}
	if n := len(ofKind(records(t, log, "r1"), events.StepDecided)); n != 0 {
		t.Errorf("got %d decisions recorded, want 0", n)
	}
}

// TestDriver_AgentRecordTooLargeChangesNothing: a model event too large
// for the log is refused before it is sent; the run is not dropped and
// the agent goes on.
func TestDriver_AgentRecordTooLargeChangesNothing(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	d := newDriver(t, log, allowAll, done())
	var refused error
	agent := driver.AgentFunc(func(ctx context.Context, in driver.StepInput) (driver.Action, error) {
		big := events.ModelAttemptBody{Call: 1, Attempt: 1, Provider: string(make([]byte, 2<<20)), SideEffect: events.SideEffectNone}
		refused = in.Record(ctx, events.ModelAttempted, big)
		return driver.Action{Final: &driver.Answer{Text: "fine"}}, nil
	})
	r := create(t, d, "r1")
	drive(t, d, r, agent)
	if !errors.Is(refused, events.ErrTooLarge) {
		t.Errorf("got %v, want ErrTooLarge", refused)
	}
	v := load(t, d, "r1").View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	if v.Model.Attempts != 0 {
		t.Errorf("the refused event folded: %+v", v.Model)
	}
}
