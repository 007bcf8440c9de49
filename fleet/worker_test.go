package fleet_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"github.com/nats-io/nats.go"
	"slices"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/testkit"
)

type env struct {
	js  *testkit.JS
	log *events.Log
	q   *fleet.Queue
	s   *fleet.Snapshots
}

func newEnv(t *testing.T, cfg fleet.Config) *env {
	t.Helper()
	js := testkit.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, s, err := fleet.Setup(ctx, js.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{js: js, log: js.Log(t, events.Config{}), q: q, s: s}
}

func (e *env) driver(t *testing.T, tools ...driver.Tool) *driver.Driver {
	t.Helper()
	d, err := driver.New(driver.Config{Log: e.log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"), Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// startWorkers runs n workers until the test ends.
func (e *env) startWorkers(t *testing.T, n int, d *driver.Driver, agents map[string]driver.Agent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: e.q, Snapshots: e.s, Agents: agents, Concurrency: 8})
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = w.Run(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() {
		cancel()
		for i := 0; i < n; i++ {
			<-done
		}
	})
}

func waitStatus(t *testing.T, d *driver.Driver, run string, want projector.Status) projector.View {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := d.Load(context.Background(), run)
		if err == nil && r.View().Run.Status == want {
			return r.View()
		}
		if time.Now().After(deadline) {
			st := "?"
			if err == nil {
				st = string(r.View().Run.Status)
			}
			t.Fatalf("run %s: status %s after 20s, want %s (err %v)", run, st, want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWorker_FleetDrivesEveryRunToTheEnd(t *testing.T) {
	e := newEnv(t, fleet.Config{})
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	d := e.driver(t, read, done)
	agent := scripted.Agent{Decisions: []driver.Action{scripted.Call("read", `{}`), scripted.Call("read", `{"a":1}`), scripted.Call("done", `{}`)}}
	e.startWorkers(t, 3, d, map[string]driver.Agent{"s": agent})
	ctx := context.Background()
	const runs = 30
	for i := 0; i < runs; i++ {
		if err := e.q.Start(ctx, d, fmt.Sprintf("run%d", i), "s", nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < runs; i++ {
		waitStatus(t, d, fmt.Sprintf("run%d", i), projector.Completed)
	}
	if got := read.Count(); got != 2*runs {
		t.Errorf("read executed %d times, want %d", got, 2*runs)
	}
	if got := done.Count(); got != runs {
		t.Errorf("done executed %d times, want %d", got, runs)
	}
}

// TestWorker_NudgeClaimingAServerStatusIsANudge: whoever may nudge (the
// operator user, any worker) can store an empty nudge whose headers claim
// a status of the server's: "409 Consumer Deleted", a 408, a 404, a 100.
// The JetStream client's fetch took such a delivery for the status, ended
// the fetch there and never acknowledged it; redelivered without limit,
// it stopped the queue behind it. Stored ahead of ten runs' own nudges
// (on their subjects, where a run's real nudge is then "already nudged",
// and on others), they are deliveries like any nudge: every run is driven
// to its end.
func TestWorker_NudgeClaimingAServerStatusIsANudge(t *testing.T) {
	e := newEnv(t, fleet.Config{})
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	d := e.driver(t, done)
	ctx := context.Background()
	statuses := []nats.Header{
		{"Status": {"409"}, "Description": {"Consumer Deleted"}},
		{"Status": {"408"}, "Description": {"Request Timeout"}},
		{"Status": {"404"}, "Description": {"No Messages"}},
		{"Status": {"100"}, "Description": {"Idle Heartbeat"}},
	}
	const runs = 10
	for i := range runs {
		for _, subj := range []string{fmt.Sprintf("run%d", i), fmt.Sprintf("nobody%d", i)} {
			m := &nats.Msg{Subject: e.q.Config().WorkPrefix + "." + subj, Header: statuses[i%len(statuses)]}
			if _, err := e.js.JS.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range runs {
		if err := e.q.Start(ctx, d, fmt.Sprintf("run%d", i), "s", nil); err != nil {
			t.Fatal(err)
		}
	}
	e.startWorkers(t, 1, d, map[string]driver.Agent{"s": scripted.Agent{Decisions: []driver.Action{scripted.Call("done", `{}`)}}})
	for i := range runs {
		waitStatus(t, d, fmt.Sprintf("run%d", i), projector.Completed)
	}
	if got := done.Count(); got != runs {
		t.Errorf("done executed %d times, want %d", got, runs)
	}
}

// TestQueue_OfferedReadsTheServersWord: whether an agent is offered is
// read from the registry with the server's headers only. An entry stored
// after a worker's live offer, empty, whose own headers claim "404", was
// taken by the client's direct get for "no entry", and the agent seemed
// offered by nobody (start refused the run as having no worker); now the
// registry read fails and says why.
func TestQueue_OfferedReadsTheServersWord(t *testing.T) {
	e := newEnv(t, fleet.Config{})
	d := e.driver(t, testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal())
	e.startWorkers(t, 1, d, map[string]driver.Agent{"s": scripted.Agent{}})
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for ok, _ := e.q.Offered(ctx, "s"); !ok; ok, _ = e.q.Offered(ctx, "s") {
		if time.Now().After(deadline) {
			t.Fatal("the worker's offer of s never showed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	forge := func(agent string) {
		subj := "$KV." + e.q.Config().AgentsBucket + "." + hex.EncodeToString([]byte(agent)) + ".zz-forged"
		if _, err := e.js.JS.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: nats.Header{"Status": {"404"}, "Description": {"Message Not Found"}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Read as the client reads it, an entry claiming "404" after the
	// worker's would hide its offer: it is no entry at all.
	forge("s")
	if ok, err := e.q.Offered(ctx, "s"); !ok || err != nil {
		t.Errorf("Offered after an entry claiming 404: %v, %v; want the worker's offer still seen", ok, err)
	}
	// And it offers nothing: an agent nobody offers is not offered, and
	// nobody's defaults are read from it.
	forge("t")
	if ok, err := e.q.Offered(ctx, "t"); ok || err != nil {
		t.Errorf("Offered for an agent with only a forged entry: %v, %v; want not offered", ok, err)
	}
	if agents, err := e.q.Agents(ctx); err != nil || !slices.Equal(agents, []string{"s"}) {
		t.Errorf("agents offered: %v, %v; want [s]", agents, err)
	}
}
