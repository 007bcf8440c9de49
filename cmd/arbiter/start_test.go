package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestStart_RefusesAnAgentNoWorkerOffers: `arbiter start --agent nosuch`
// used to answer "started" with exit 0, and the run sat RUNNING for ever.
// With a live worker offering only "demo", it is refused, naming what is
// offered, and nothing is recorded; --force records it anyway, and the
// agent that is offered starts (issue 10, item 8).
func TestStart_RefusesAnAgentNoWorkerOffers(t *testing.T) {
	e := newOpsEnv(t)
	q := fleet.NewQueue(e.js, fleet.Config{})
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: e.d, Queue: q, Agents: map[string]driver.Agent{"demo": testkit.NewScript(testkit.Call("done", `{}`))}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ok, _ := q.Offered(t.Context(), "demo"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker never offered its agent")
		}
	}

	var out bytes.Buffer
	err = runStart(t.Context(), e.args("--agent", "nosuch", "--id", "run-nosuch"), &out)
	if err == nil || !strings.Contains(err.Error(), `no live worker offers agent "nosuch" (offered: demo)`) {
		t.Fatalf("start --agent nosuch = %v, want it refused naming the offered agents", err)
	}
	if _, _, err := e.log.Read(t.Context(), "run-nosuch"); err == nil {
		t.Error("a refused start recorded the run")
	}
	if err := runStart(t.Context(), e.args("--agent", "demo", "--id", "run-demo"), &out); err != nil {
		t.Fatalf("start --agent demo: %v", err)
	}
	if err := runStart(t.Context(), e.args("--agent", "nosuch", "--id", "run-forced", "--force"), &out); err != nil {
		t.Fatalf("start --force: %v", err)
	}
	recs, _, err := e.log.Read(t.Context(), "run-forced")
	if err != nil || len(recs) == 0 || recs[0].Event.Kind != events.RunCreated {
		t.Fatalf("forced run: %d events, %v", len(recs), err)
	}
}
