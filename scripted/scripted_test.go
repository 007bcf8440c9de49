package scripted_test

import (
	"context"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/scripted"
)

// The agent decides by the number of steps in the view, so a worker that
// picks a run up mid-way asks for the next call, not the first.
func TestAgent_DecidesByStepCount(t *testing.T) {
	a := scripted.Agent{Decisions: []driver.Action{scripted.Call("a", `{}`), scripted.Call("b", `{"x":1}`)}}
	ctx := context.Background()
	d, err := a.Decide(ctx, driver.StepInput{})
	if err != nil || d.Tool != "a" {
		t.Errorf("first: got %+v, %v", d, err)
	}
	d, err = a.Decide(ctx, driver.StepInput{Steps: projector.StepsOf(projector.Step{N: 1})})
	if err != nil || d.Tool != "b" || string(d.Args) != `{"x":1}` {
		t.Errorf("second: got %+v, %v", d, err)
	}
	if _, err := a.Decide(ctx, driver.StepInput{Steps: projector.StepsOf(projector.Step{N: 1}, projector.Step{N: 2})}); err == nil {
		t.Error("past the end of the script: got nil error")
	}
}
