package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// interruptFirst returns a Result that is interrupted on the first n calls
// and answers "ok" after.
func interruptFirst(n int) func(context.Context, json.RawMessage) (string, error) {
	calls := 0
	return func(context.Context, json.RawMessage) (string, error) {
		calls++
		if calls <= n {
			return "", fmt.Errorf("server died: %w", driver.ErrInterrupted)
		}
		return "ok", nil
	}
}

func TestDriver_InterruptedReadOnlyRunsOnceMore(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	for _, tc := range []struct {
		name        string
		interrupted int
		want        events.ObservationKind
	}{
		{"once", 1, events.ObsResult},
		{"twice", 2, events.ObsToolError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
			read.Result = interruptFirst(tc.interrupted)
			d := newDriver(t, log, allowAll, read, done())
			r := create(t, d, "ro-"+tc.name)
			drive(t, d, r, testkit.NewScript(testkit.Call("read_file", `{"path":"a"}`), testkit.Call("done", `{}`)))
			if got := resolution(t, log, "ro-"+tc.name).Resolution; got != events.ResolvedRerun {
				t.Errorf("resolution: got %s, want %s", got, events.ResolvedRerun)
			}
			wantCount(t, read, 2)
			if s := stepOf(t, r, 1); s.Observation == nil || s.Observation.Kind != tc.want {
				t.Errorf("step 1 observation: got %+v, want kind %s", s.Observation, tc.want)
			}
		})
	}
}

func TestDriver_InterruptedSideEffectWaitsForOperator(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send_email", events.RemoteMutation, toSchema)
	send.Result = interruptFirst(1)
	kp, ops := operator(t)
	clk := newClock()
	d := newDriverCfg(t, driver.Config{Log: log, Policy: allowAll, Tools: []driver.Tool{send, done()}, Operators: ops, ApprovalTTL: time.Hour, Now: clk.Now})
	r := create(t, d, "se")
	agent := testkit.NewScript(testkit.Call("send_email", `{"to":"ops@example.com"}`), testkit.Call("done", `{}`))
	drive(t, d, r, agent)

	wantCount(t, send, 1)
	wantEnd(t, r.View(), projector.Waiting, driver.InterruptedSideEffect)
	if got := len(ofKind(records(t, log, "se"), events.StepObserved)); got != 0 {
		t.Errorf("observations before the operator decided: got %d, want 0", got)
	}
	grant(t, d, r, kp)
	drive(t, d, r, agent)
	wantCount(t, send, 2)
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
}

func TestCompile_PinAndFixedAreRecorded(t *testing.T) {
	l := testkit.NewLedger("t", events.ReadOnly, testkit.AnyObject)
	l.S.Pin = "p1"
	l.S.Fixed = json.RawMessage(`{ "root": "/srv" }`)
	ct, err := driver.Compile(l)
	if err != nil {
		t.Fatal(err)
	}
	if ct.Record.Pin != "p1" || ct.Record.Fixed != `{"root":"/srv"}` {
		t.Errorf("record: got pin %q fixed %q, want p1 and the fixed object in PolicyJSON form", ct.Record.Pin, ct.Record.Fixed)
	}
	for _, bad := range []string{`[1]`, `{"a":`} {
		l.S.Fixed = json.RawMessage(bad)
		if _, err := driver.Compile(l); !errors.Is(err, driver.ErrBadTool) {
			t.Errorf("fixed %s: got %v, want ErrBadTool", bad, err)
		}
	}
}
