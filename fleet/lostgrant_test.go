package fleet_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

// A grant published after the worker's last read of the decisions stream,
// while its nudge of the run is not yet acked, has its own nudge refused
// (one waits per run) and is not appended to the run until a worker takes
// it in: the worker looks at the decisions stream once more after its ack,
// so the grant is taken in and the run completes instead of waiting for
// ever (the quickstart's test failed so once in CI).
func TestWorker_AGrantPublishedBeforeTheAckIsNotLost(t *testing.T) {
	js := testkit.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := client.Setup(ctx, js.JS, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	op, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := op.PublicKey()
	const run = "grant-in-the-window"
	var once sync.Once
	granted := make(chan error, 1)
	// The driver reads its clock right after it found no decision on the
	// decisions stream (to see whether the approval expired): the
	// operator grants there, after the drive's last read and before the
	// worker acks the nudge it drives the run for.
	now := func() time.Time {
		if v, err := c.View(context.Background(), run); err == nil && v.Run.Status == projector.Waiting {
			if a := v.PendingApproval(); a != nil && a.State == projector.Pending {
				once.Do(func() {
					_, err := c.Grant(context.Background(), op, run, a.ID, "checked")
					granted <- err
				})
			}
		}
		return time.Now()
	}
	send := testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject)
	ask := policy.WithID(policy.SideEffectPolicy{events.RemoteMutation: events.RequireApproval, events.ReadOnly: events.Allow}, "remote needs an operator")
	d, err := driver.New(driver.Config{Log: c.Log(), Policy: ask, Tools: []driver.Tool{send}, Operators: map[string]string{pub: "alice"}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	agent := driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
		if last, ok := in.Steps.Last(); ok && last.Observation != nil {
			return driver.Action{Final: &driver.Answer{Text: last.Observation.Content}}, nil
		}
		return testkit.Call("send", `{}`), nil
	})
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: c.Queue(), Agents: map[string]driver.Agent{"a": agent}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() { worked <- w.Run(wctx) }()
	defer func() { stop(); <-worked }()
	if err := c.WaitAgent(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, client.StartOptions{ID: run, Agent: "a", Input: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the run never waited for the operator")
	}
	wait, cancelWait := context.WithTimeout(ctx, 10*time.Second)
	defer cancelWait()
	r, err := c.Wait(wait, run)
	if err != nil {
		t.Fatalf("the grant was lost: %v", err)
	}
	if r.Status != projector.Completed || send.Count() != 1 {
		t.Fatalf("run %s after %d sends, want completed with the send run once", r.Status, send.Count())
	}
}
