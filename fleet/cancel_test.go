package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestWorker_NoticesCancellationAtOnce: a run cancelled while its tool
// runs has the tool's context cancelled while the call is still in flight
// (its own timeout is a minute), and ends CANCELLED with nothing more
// executed. Before the watch, the worker learned of it only when the tool
// returned and its observation's append conflicted.
func TestWorker_NoticesCancellationAtOnce(t *testing.T) {
	e := newEnv(t, fleet.Config{})
	entered, stopped := make(chan struct{}, 1), make(chan error, 1)
	slow := testkit.NewLedger("slow", events.ReadOnly, testkit.AnyObject)
	slow.S.Timeout = time.Minute
	slow.Result = func(ctx context.Context, _ json.RawMessage) (string, error) {
		entered <- struct{}{}
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return "", ctx.Err()
	}
	d := e.driver(t, slow)
	e.startWorkers(t, 1, d, map[string]driver.Agent{"s": scripted.Agent{Decisions: []driver.Action{scripted.Call("slow", `{}`), scripted.Call("slow", `{"again":1}`)}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.q.Start(ctx, d, "slowrun", "s", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the tool was never called")
	}
	if err := client.New(e.log, e.q).Cancel(ctx, "slowrun", "stop it"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stopped:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the tool's context ended with %v, want it cancelled (not its timeout)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the tool in flight was not stopped within 10s of the cancellation (its own timeout is a minute)")
	}
	v := waitStatus(t, d, "slowrun", projector.Cancelled)
	if v.Run.Detail != "stop it" || slow.Count() != 1 {
		t.Errorf("run %s %q, tool ran %d times; want the cancellation's reason and one call", v.Run.Status, v.Run.Detail, slow.Count())
	}
}

// TestWorker_DefaultConcurrencyIs16: a worker left at its default drives
// 16 runs at once and not a 17th, which it takes as soon as one of the 16
// is done.
func TestWorker_DefaultConcurrencyIs16(t *testing.T) {
	e := newEnv(t, fleet.Config{})
	entered, release := make(chan string, 32), make(chan struct{}, 32)
	hold := testkit.NewLedger("hold", events.ReadOnly, testkit.AnyObject)
	hold.S.Timeout = time.Minute
	hold.Result = func(ctx context.Context, args json.RawMessage) (string, error) {
		entered <- string(args)
		select {
		case <-release:
			return "ok", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	d := e.driver(t, hold, done)
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: e.q, Snapshots: e.s, Agents: map[string]driver.Agent{"s": scripted.Agent{Decisions: []driver.Action{scripted.Call("hold", `{}`), scripted.Call("done", `{}`)}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stoppedRun := make(chan struct{})
	go func() { defer close(stoppedRun); _ = w.Run(ctx) }()
	t.Cleanup(func() {
		for range 32 {
			release <- struct{}{}
		}
		cancel()
		<-stoppedRun
	})
	const runs = 17
	for i := range runs {
		if err := e.q.Start(ctx, d, fmt.Sprintf("c%02d", i), "s", nil); err != nil {
			t.Fatal(err)
		}
	}
	in := 0
	for deadline := time.After(20 * time.Second); in < 16; in++ {
		select {
		case <-entered:
		case <-deadline:
			t.Fatalf("%d runs in their tool at once, want 16", in)
		}
	}
	select {
	case <-entered:
		t.Fatal("a 17th run was driven while 16 were in flight")
	case <-time.After(500 * time.Millisecond):
	}
	// It could have been: once one of the 16 is done, the 17th is driven.
	release <- struct{}{}
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the 17th run was not driven after one of the 16 was done")
	}
}
