package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/model"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/testkit"
)

// chatReply is a Chat Completions reply calling tool with args.
func chatReply(id, tool, args string) testkit.ModelReply {
	return testkit.ModelReply{Body: fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`, id, tool, args)}
}

// TestFleet_BudgetGrantWaitsForAWorkerWithTheAgent: a run paused over its
// model budget is granted while only a worker without its model agent
// runs. That worker records the grant and leaves the run to one that has
// the agent (it does not ack the run away); a worker with the agent
// started later uses the grant and ends the run.
func TestFleet_BudgetGrantWaitsForAWorkerWithTheAgent(t *testing.T) {
	f := newApprovalFleet(t, 0)
	srv := testkit.NewModelServer(t, chatReply("c1", "done", `[]`), chatReply("c2", "done", `{}`))
	agent, err := model.New(model.Config{Provider: model.OpenAI, BaseURL: srv.URL + "/v1", Model: "m",
		Budget: model.Budget{Calls: 1}, OverBudget: model.OverBudget{Approve: true}})
	if err != nil {
		t.Fatal(err)
	}
	// A worker offering agents, on a connection of its own that is closed
	// when it stops: a stopped worker's fetch left open on the server
	// would take the nudge and hold it for the ack wait.
	worker := func(ctx context.Context, agents map[string]driver.Agent) chan struct{} {
		nc, err := f.js.Server.Connect()
		if err != nil {
			t.Fatal(err)
		}
		member := testkit.OnConn(t, f.js.Server, nc)
		q, s, err := fleet.Attach(t.Context(), member.JS, fleet.Config{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := f.cfg
		cfg.Log = member.Log(t, events.Config{})
		d, err := driver.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: q, Snapshots: s, Agents: agents})
		if err != nil {
			t.Fatal(err)
		}
		stopped := make(chan struct{})
		go func() { defer close(stopped); defer nc.Close(); _ = w.Run(ctx) }()
		return stopped
	}
	withAgent := map[string]driver.Agent{"m": agent}
	without := map[string]driver.Agent{"demo": scripted.Agent{Decisions: []driver.Action{scripted.Call("done", `{}`)}}}
	d, q, _ := f.member(t)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := worker(ctx, withAgent)
	if err := q.Start(t.Context(), d, "run-b", "m", []byte(`"finish"`)); err != nil {
		t.Fatal(err)
	}
	v := waitFor(t, d, "run-b", 30*time.Second, "waiting on its budget", waiting)
	cancel()
	<-stopped
	a := v.PendingApproval()
	if a.Kind != events.BudgetApproval {
		t.Fatalf("waits on a %s approval, want budget", a.Kind)
	}

	ctx, cancel = context.WithCancel(context.Background())
	stopped = worker(ctx, without)
	f.grant(t, d.Log(), "run-b", *a)
	if err := q.Nudge(t.Context(), "run-b", "granted"); err != nil {
		t.Fatal(err)
	}
	v = waitFor(t, d, "run-b", 30*time.Second, "granted", func(v projector.View) bool {
		a := v.Approval(a.ID)
		return a != nil && a.State == projector.Granted
	})
	if v.Run.Status != projector.Waiting || len(srv.Requests()) != 1 {
		t.Fatalf("run %s with %d model requests, want it waiting after 1", v.Run.Status, len(srv.Requests()))
	}

	// The worker without the agent recorded the grant and left the run in
	// the queue; it stops, and one with the agent takes the run up.
	cancel()
	<-stopped
	ctx, cancel = context.WithCancel(context.Background())
	stopped = worker(ctx, withAgent)
	t.Cleanup(func() { cancel(); <-stopped })
	v = waitFor(t, d, "run-b", 30*time.Second, "completed", func(v projector.View) bool { return v.Run.Status.Ended() })
	if v.Run.Status != projector.Completed || v.Approval(a.ID).State != projector.Consumed || len(srv.Requests()) != 2 {
		t.Errorf("run %s %s %q, approval %s, %d requests: want completed on the consumed grant after 2", v.Run.Status, v.Run.Reason, v.Run.Detail, v.Approval(a.ID).State, len(srv.Requests()))
	}
}
