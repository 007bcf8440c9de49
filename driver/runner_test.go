package driver_test

import (
	"context"
	"encoding/json"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// runnerStacks counts the goroutines whose stack is in the drive's tool
// runner's loop.
func runnerStacks() int {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
	return strings.Count(b.String(), "driver.(*runner).loop")
}

// TestDriver_ToolCallsShareADrivesRunner: a drive's tool calls run one
// after another on one goroutine of the drive's, which ends with the
// drive; a call that overran its timeout is left on its runner, and the
// next call runs on a fresh one and gets its own result, even when the
// call left behind returns while it runs.
func TestDriver_ToolCallsShareADrivesRunner(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	onRunner := func() bool {
		buf := make([]byte, 64<<10)
		return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "driver.(*runner).loop")
	}
	var seen []bool
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	read.Result = func(context.Context, json.RawMessage) (string, error) {
		seen = append(seen, onRunner())
		return "read", nil
	}
	stubborn, release, returned := stubbornTool(20 * time.Millisecond)
	mine := testkit.NewLedger("mine", events.ReadOnly, testkit.AnyObject)
	mine.Result = func(context.Context, json.RawMessage) (string, error) {
		close(release) // the call left behind returns now, while this one runs
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			return "", context.DeadlineExceeded
		}
		return "mine", nil
	}
	d := newDriver(t, log, allowAll, read, stubborn, mine, done())
	r := create(t, d, "runner")
	drive(t, d, r, testkit.NewScript(
		testkit.Call("read", `{}`),
		testkit.Call("read", `{}`),
		testkit.Call("stubborn", `{}`),
		testkit.Call("mine", `{}`),
		testkit.Call("read", `{}`),
		testkit.Call("done", `{}`),
	))
	v := r.View()
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	for n, want := range map[int]struct {
		kind    events.ObservationKind
		content string
	}{1: {events.ObsResult, "read"}, 3: {events.ObsTimeout, "timed out"}, 4: {events.ObsResult, "mine"}, 5: {events.ObsResult, "read"}} {
		o := v.Step(n).Observation
		if o == nil || o.Kind != want.kind || !strings.Contains(o.Content, want.content) {
			t.Fatalf("step %d: observation %+v, want %s %q", n, o, want.kind, want.content)
		}
	}
	if len(seen) != 3 || !seen[0] || !seen[1] || !seen[2] {
		t.Fatalf("the read calls ran on the drive's runner: %v, want 3 times true", seen)
	}
	// The drive is over: its runners end (the one left with the stubborn
	// call ended once that call returned).
	for deadline := time.Now().Add(10 * time.Second); runnerStacks() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d tool runners still running 10 s after the drive ended", runnerStacks())
		}
	}
}
