package driver_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

func TestApplyLimits_ZeroTakesDefaultNoLimitIsNone(t *testing.T) {
	def := events.Limits{MaxSteps: 100, MaxFailuresInRow: 5, MaxRepeats: 5, MaxElapsedMS: 60000}
	for _, c := range []struct {
		name  string
		asked events.Limits
		want  events.Limits
	}{
		{"zero is the default", events.Limits{}, def},
		{"positive is kept", events.Limits{MaxSteps: 1000, MaxElapsedMS: 5}, events.Limits{MaxSteps: 1000, MaxFailuresInRow: 5, MaxRepeats: 5, MaxElapsedMS: 5}},
		{"NoLimit is none", events.Limits{MaxSteps: driver.NoLimit, MaxFailuresInRow: driver.NoLimit, MaxRepeats: driver.NoLimit, MaxElapsedMS: driver.NoLimit}, events.Limits{}},
	} {
		got, err := driver.ApplyLimits(c.asked, def)
		if err != nil || got != c.want {
			t.Errorf("%s: ApplyLimits(%+v) = %+v, %v; want %+v", c.name, c.asked, got, err, c.want)
		}
	}
}

func TestApplyLimits_BelowNoLimitIsRefusedByName(t *testing.T) {
	for _, c := range []struct {
		asked events.Limits
		field string
	}{
		{events.Limits{MaxSteps: -2}, "max_steps -2"},
		{events.Limits{MaxFailuresInRow: -5}, "max_failures_in_row -5"},
		{events.Limits{MaxRepeats: -3}, "max_repeats -3"},
		{events.Limits{MaxElapsedMS: -10}, "max_elapsed_ms -10"},
	} {
		_, err := driver.ApplyLimits(c.asked, driver.DefaultLimits)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("ApplyLimits(%+v): %v, want an error naming %q", c.asked, err, c.field)
		}
	}
	env := testkit.JetStream(t)
	if _, err := driver.New(driver.Config{Log: env.Log(t, events.Config{}), Policy: allowAll, Limits: events.Limits{MaxSteps: -7}}); err == nil || !strings.Contains(err.Error(), "max_steps -7") {
		t.Errorf("driver.New with max_steps -7: %v, want an error naming it", err)
	}
}

// TestDriver_NoStepLimitRunsPastTheDefault: a run asked for with no step
// limit goes past the default's 100 steps (and records no step limit),
// where one with the defaults stops at 100.
func TestDriver_NoStepLimitRunsPastTheDefault(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	d := newDriverCfg(t, driver.Config{Log: log, Policy: allowAll, Tools: []driver.Tool{read, done()}})
	const steps = 150
	agent := driver.AgentFunc(func(ctx context.Context, in driver.StepInput) (driver.Action, error) {
		if in.Steps.Len() == steps {
			return testkit.Call("done", `{}`), nil
		}
		return readN().Decide(ctx, in)
	})
	ctx := t.Context()
	unlimited, err := d.CreateWith(ctx, "unlimited", driver.CreateOptions{Agent: "a", Limits: events.Limits{MaxSteps: driver.NoLimit}})
	if err != nil {
		t.Fatal(err)
	}
	drive(t, d, unlimited, agent)
	v := unlimited.View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	if v.Run.Steps != steps+1 || v.Run.Limits.MaxSteps != 0 || v.Run.Limits.MaxRepeats != driver.DefaultLimits.MaxRepeats {
		t.Errorf("unlimited run: %d steps, limits %+v; want %d steps, no step limit, the default repeats", v.Run.Steps, v.Run.Limits, steps+1)
	}

	def, err := d.CreateWith(ctx, "default", driver.CreateOptions{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	drive(t, d, def, agent)
	v = def.View()
	wantEnd(t, v, projector.Failed, events.ReasonStepLimit)
	if v.Run.Steps != driver.DefaultLimits.MaxSteps || v.Run.Limits != driver.DefaultLimits {
		t.Errorf("default run: %d steps, limits %+v; want %d and %+v recorded", v.Run.Steps, v.Run.Limits, driver.DefaultLimits.MaxSteps, driver.DefaultLimits)
	}
}

func TestDriver_CreateWithBadLimitRecordsNothing(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	d := newDriverCfg(t, driver.Config{Log: log, Policy: allowAll})
	if _, err := d.CreateWith(t.Context(), "bad", driver.CreateOptions{Limits: events.Limits{MaxRepeats: -4}}); err == nil || !strings.Contains(err.Error(), "max_repeats -4") {
		t.Fatalf("CreateWith max_repeats -4: %v, want an error naming it", err)
	}
	if _, _, err := log.Read(t.Context(), "bad"); !errors.Is(err, events.ErrNoRun) {
		t.Errorf("read after a refused create: %v, want no run", err)
	}
}

func TestDescribeLimits(t *testing.T) {
	if got, want := driver.DescribeLimits(driver.DefaultLimits), "100 steps, 5 failures in a row, 5 repeats, no time limit"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := driver.DescribeLimits(events.Limits{MaxElapsedMS: 9}), "no step limit, no failure limit, no repeat limit, 9 ms"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
