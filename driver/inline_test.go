package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
)

// inlineTool is a read-only tool that says whether it runs inline and
// records the stack it was executed on.
type inlineTool struct {
	inline  bool
	timeout time.Duration
	exec    func(ctx context.Context) (string, error)
	stacks  []string
}

var _ driver.Inline = (*inlineTool)(nil)

func (t *inlineTool) Inline() bool { return t.inline }

func (t *inlineTool) Spec() driver.Spec {
	timeout := t.timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	return driver.Spec{Name: "look", Description: "look", Schema: json.RawMessage(pathSchema), SideEffect: events.ReadOnly, Timeout: timeout}
}

func (t *inlineTool) Execute(ctx context.Context, _ json.RawMessage) (string, error) {
	buf := make([]byte, 64<<10)
	t.stacks = append(t.stacks, string(buf[:runtime.Stack(buf, false)]))
	if t.exec != nil {
		return t.exec(ctx)
	}
	return "seen", nil
}

// driveLook drives one call of look and the terminal tool on a run of its
// own, and returns step 1's observation.
func driveLook(t *testing.T, ctx context.Context, log *events.Log, id string, tool *inlineTool) events.ObservedBody {
	t.Helper()
	d := newDriver(t, log, allowAll, tool, done())
	r := create(t, d, id)
	if err := d.Drive(ctx, r, testkit.NewScript(testkit.Call("look", `{"path":"a"}`), testkit.Call("done", `{}`))); err != nil {
		t.Fatalf("drive run %s: %v", id, err)
	}
	s := stepOf(t, r, 1)
	if s.Observation == nil {
		t.Fatalf("run %s step 1: no observation", id)
	}
	return *s.Observation
}

// A tool that says it runs inline is executed on the goroutine that drives
// the run (its stack holds the drive); any other, and an inline one under
// a busy hook, on a goroutine of its own.
func TestDriver_InlineToolRunsOnTheDrivingGoroutine(t *testing.T) {
	log := testkit.JetStream(t).Log(t, events.Config{})
	busy := driver.WithBusy(t.Context(), time.Hour, func() {})
	for _, tc := range []struct {
		name   string
		inline bool
		ctx    context.Context
		want   bool
	}{
		{"inline", true, t.Context(), true},
		{"not-inline", false, t.Context(), false},
		{"inline-busy", true, busy, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tool := &inlineTool{inline: tc.inline}
			if o := driveLook(t, tc.ctx, log, "inline-"+tc.name, tool); o.Kind != events.ObsResult || o.Content != "seen" {
				t.Fatalf("observation: got %+v, want the result", o)
			}
			if len(tool.stacks) != 1 {
				t.Fatalf("executions: got %d, want 1", len(tool.stacks))
			}
			if got := strings.Contains(tool.stacks[0], "(*Driver).DriveUntil"); got != tc.want {
				t.Fatalf("executed on the driving goroutine: got %v, want %v; stack:\n%s", got, tc.want, tool.stacks[0])
			}
		})
	}
}

// An inline tool keeps the answers a tool on its own goroutine gets: a
// panic is its tool_error, a result after the deadline is a timeout, and
// an interrupted call is recovered (a read-only one runs once more).
func TestDriver_InlineToolKeepsTheCallsAnswers(t *testing.T) {
	log := testkit.JetStream(t).Log(t, events.Config{})
	calls := 0
	for _, tc := range []struct {
		name     string
		exec     func(ctx context.Context) (string, error)
		kind     events.ObservationKind
		contains string
		runs     int
	}{
		{"panic", func(context.Context) (string, error) { panic("boom") }, events.ObsToolError, "panicked: boom", 1},
		{"late", func(ctx context.Context) (string, error) { <-ctx.Done(); return "too late", nil }, events.ObsTimeout, "timed out", 1},
		{"interrupted", func(context.Context) (string, error) {
			calls++
			if calls == 1 {
				return "", fmt.Errorf("server died: %w", driver.ErrInterrupted)
			}
			return "second", nil
		}, events.ObsResult, "second", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tool := &inlineTool{inline: true, timeout: 100 * time.Millisecond, exec: tc.exec}
			o := driveLook(t, t.Context(), log, "inline-answer-"+tc.name, tool)
			if o.Kind != tc.kind || !strings.Contains(o.Content, tc.contains) {
				t.Fatalf("observation: got %+v, want %s containing %q", o, tc.kind, tc.contains)
			}
			if len(tool.stacks) != tc.runs {
				t.Fatalf("executions: got %d, want %d", len(tool.stacks), tc.runs)
			}
		})
	}
}
