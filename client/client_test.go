package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

// env is a fleet of one worker on an embedded JetStream and a client of
// it, with an operator key the worker accepts.
type env struct {
	c    *client.Client
	send *testkit.Ledger
	key  nkeys.KeyPair
}

// sender sends (remote_mutation: the default policy asks an operator),
// then answers with what the send returned.
var sender = driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
	last, ok := in.Steps.Last()
	if !ok {
		return testkit.Call("send", `{"to":"ops"}`), nil
	}
	if last.Observation == nil {
		return driver.Action{}, errors.New("asked with no observation")
	}
	return driver.Action{Final: &driver.Answer{Text: "sent: " + last.Observation.Content}}, nil
})

// answerer answers its input at once.
var answerer = driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
	return driver.Action{Final: &driver.Answer{Text: "echo " + string(in.Run.Input)}}, nil
})

func newEnv(t *testing.T) *env {
	t.Helper()
	js := testkit.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Setup(ctx, js.JS, client.Config{Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := nkeys.CreateUser()
	pub, _ := key.PublicKey()
	send := testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject)
	send.Result = func(context.Context, json.RawMessage) (string, error) { return "delivered", nil }
	d, err := driver.New(driver.Config{Log: c.Log(), Policy: policy.WithID(policy.DefaultSideEffects(), "se"), Tools: []driver.Tool{send}, Operators: approvals.Operators{pub: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, c.Queue(), d, map[string]driver.Agent{"sender": sender, "answerer": answerer})
	if err := c.WaitAgent(ctx10(t), "answerer"); err != nil {
		t.Fatal(err)
	}
	return &env{c: c, send: send, key: key}
}

func startWorker(t *testing.T, q *fleet.Queue, d *driver.Driver, agents map[string]driver.Agent) {
	t.Helper()
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: q, Agents: agents})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestClient_WaitAgentTimesOut: an agent nobody offers is waited for until
// ctx ends, and said.
func TestClient_WaitAgentTimesOut(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if err := e.c.WaitAgent(ctx, "nosuch"); !errors.Is(err, client.ErrNoAgent) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitAgent(nosuch): %v, want ErrNoAgent and the deadline", err)
	}
	if err := e.c.WaitAgent(t.Context(), "sender"); err != nil {
		t.Errorf("WaitAgent(sender), offered: %v", err)
	}
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestClient_StartWaitOnTheFleet: a run started by the client is driven
// by a worker elsewhere, and Wait returns its answer.
func TestClient_StartWaitOnTheFleet(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	st, err := e.c.Start(ctx, client.StartOptions{Agent: "answerer", Input: json.RawMessage(`"hi"`)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.c.Wait(ctx, st.Run)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != projector.Completed || r.Result != `echo "hi"` {
		t.Errorf("got %s %q, want COMPLETED with the answer", r.Status, r.Result)
	}
	if again, err := e.c.Result(ctx, st.Run); err != nil || again.Result != r.Result {
		t.Errorf("Result after Wait: %q, %v", again.Result, err)
	}
}

// TestClient_StartRecordsItsLimits: the defaults are applied visibly (in
// run.created and in Started), a run's own limits and NoLimit are
// recorded as asked, and a limit below NoLimit records nothing.
func TestClient_StartRecordsItsLimits(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	for _, c := range []struct {
		id    string
		asked events.Limits
		want  events.Limits
	}{
		{"defaults", events.Limits{}, driver.DefaultLimits},
		{"own", events.Limits{MaxSteps: 1000, MaxElapsedMS: 60000}, events.Limits{MaxSteps: 1000, MaxFailuresInRow: 5, MaxRepeats: 5, MaxElapsedMS: 60000}},
		{"none", events.Limits{MaxSteps: driver.NoLimit, MaxRepeats: driver.NoLimit}, events.Limits{MaxFailuresInRow: 5}},
	} {
		st, err := e.c.Start(ctx, client.StartOptions{ID: c.id, Agent: "answerer", Limits: c.asked})
		if err != nil {
			t.Fatal(err)
		}
		if st.Limits != c.want {
			t.Errorf("%s: Started.Limits %+v, want %+v", c.id, st.Limits, c.want)
		}
		recs, err := e.c.Events(ctx, c.id)
		if err != nil {
			t.Fatal(err)
		}
		b, err := events.DecodeBody[events.RunCreatedBody](recs[0].Event)
		if err != nil || b.Limits != c.want {
			t.Errorf("%s: run.created limits %+v (%v), want %+v", c.id, b.Limits, err, c.want)
		}
	}
	_, err := e.c.Start(ctx, client.StartOptions{ID: "bad-limit", Agent: "answerer", Limits: events.Limits{MaxSteps: -3}})
	if err == nil || !strings.Contains(err.Error(), "max_steps -3") {
		t.Errorf("start with max_steps -3: %v, want it refused by name", err)
	}
	if _, err := e.c.View(ctx, "bad-limit"); !errors.Is(err, client.ErrNoRun) {
		t.Errorf("a refused start recorded the run: %v", err)
	}
}

// TestClient_StartAgainIsARetry: the same start again (as after a nudge
// that failed) is no error and nudges again; another start on the id is
// ErrRunExists naming the run, and so is the same start once the run
// ended.
func TestClient_StartAgainIsARetry(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	// A start that recorded the run but never nudged: no queue at all.
	noQueue := client.New(e.c.Log(), nil)
	o := client.StartOptions{ID: "retried", Agent: "answerer", Input: json.RawMessage(`{"a": 1}`), Force: true}
	st, err := noQueue.Start(ctx, o)
	if err == nil || st.Run != "retried" || !strings.Contains(err.Error(), "not nudged") {
		t.Fatalf("start without a queue: %+v, %v; want the run recorded and the nudge's failure said", st, err)
	}
	v, err := e.c.View(ctx, "retried")
	if err != nil || v.Run.Status != projector.Running || v.Run.Events != 1 {
		t.Fatalf("recorded run: %s with %d events, %v; want RUNNING, only run.created (nobody was nudged)", v.Run.Status, v.Run.Events, err)
	}
	o.Force = false
	o.Input = json.RawMessage(`{"a":1}`) // the same JSON, spaced otherwise
	st, err = e.c.Start(ctx, o)
	if err != nil || !st.Again {
		t.Fatalf("the same start again: %+v, %v; want Again", st, err)
	}
	if r, err := e.c.Wait(ctx, "retried"); err != nil || r.Result != `echo {"a":1}` {
		t.Fatalf("the re-nudged run: %q, %v; want it driven to its answer", r.Result, err)
	}
	for _, other := range []client.StartOptions{
		{ID: "retried", Agent: "answerer", Input: json.RawMessage(`{"a":1}`)}, // ended now
		{ID: "retried", Agent: "sender"},
	} {
		_, err := e.c.Start(ctx, other)
		if !errors.Is(err, client.ErrRunExists) || !strings.Contains(err.Error(), "run retried") {
			t.Errorf("start %+v: %v, want ErrRunExists naming the run", other, err)
		}
	}
}

// TestClient_StartRefusesBadInput: each mistake is named and nothing is
// recorded.
func TestClient_StartRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	for _, c := range []struct {
		o    client.StartOptions
		want string
	}{
		{client.StartOptions{ID: "noagent"}, "no agent"},
		{client.StartOptions{ID: "bad id", Agent: "answerer"}, "bad id"},
		{client.StartOptions{ID: "badinput", Agent: "answerer", Input: json.RawMessage(`{"a":`)}, "input"},
		{client.StartOptions{ID: "nosuch", Agent: "nosuch"}, `no live worker offers agent "nosuch"`},
	} {
		_, err := e.c.Start(ctx, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("start %+v: %v, want an error naming %q", c.o, err, c.want)
		}
		if _, _, err := e.c.Log().Read(ctx, c.o.ID); !errors.Is(err, events.ErrNoRun) && events.ValidRunID(c.o.ID) == nil {
			t.Errorf("start %+v recorded the run: %v", c.o, err)
		}
	}
	_, err := e.c.Start(ctx, client.StartOptions{ID: "nosuch", Agent: "nosuch"})
	if !errors.Is(err, client.ErrNoAgent) {
		t.Errorf("unoffered agent: %v, want ErrNoAgent", err)
	}
}

// TestClient_GrantOnTheFleet: the run waits on its send, the grant is
// recorded by the worker, the send runs once and the run answers.
func TestClient_GrantOnTheFleet(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	st, err := e.c.Start(ctx, client.StartOptions{Agent: "sender"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.c.WaitApproval(ctx, st.Run)
	if err != nil {
		t.Fatal(err)
	}
	if e.send.Count() != 0 {
		t.Fatal("the send ran before a grant")
	}
	list, err := e.c.Approvals(ctx)
	if err != nil || len(list) != 1 || list[0].Run != st.Run || list[0].Approval.ID != a.ID {
		t.Fatalf("approvals: %+v, %v; want the one waiting", list, err)
	}
	d, err := e.c.Grant(ctx, e.key, st.Run, a.ID, "fine")
	if err != nil || d.Unnudged != nil || d.Seq == 0 {
		t.Fatalf("grant: %+v, %v", d, err)
	}
	r, err := e.c.Wait(ctx, st.Run)
	if err != nil || r.Result != "sent: delivered" {
		t.Fatalf("after the grant: %s %q, %v", r.Status, r.Result, err)
	}
	if e.send.Count() != 1 {
		t.Errorf("send ran %d times, want once", e.send.Count())
	}
	_, err = e.c.Grant(ctx, e.key, st.Run, a.ID, "again")
	if !errors.Is(err, approvals.ErrNotPending) {
		t.Errorf("a second grant: %v, want ErrNotPending", err)
	}
}

// TestClient_DenyOnTheFleet: a denial is recorded, the send never runs,
// and the agent is told.
func TestClient_DenyOnTheFleet(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	st, err := e.c.Start(ctx, client.StartOptions{Agent: "sender"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.c.WaitApproval(ctx, st.Run)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Deny(ctx, e.key, st.Run, a.ID, "no"); err != nil {
		t.Fatal(err)
	}
	r, err := e.c.Wait(ctx, st.Run)
	if !errors.Is(err, client.ErrNoAnswer) || r.Status != projector.Cancelled || r.Reason != string(events.ReasonApprovalDenied) {
		t.Fatalf("after the denial: %s %s, %v; want CANCELLED approval_denied, no answer", r.Status, r.Reason, err)
	}
	if e.send.Count() != 0 {
		t.Errorf("a denied send ran %d times", e.send.Count())
	}
	v, _ := e.c.View(ctx, st.Run)
	if got := v.Approval(a.ID); got == nil || got.State != projector.Denied {
		t.Errorf("approval after the denial: %+v, want DENIED", got)
	}
}

// TestClient_DecideRefusesWhatItCannotSign: each refusal is its sentinel,
// and nothing is published.
func TestClient_DecideRefusesWhatItCannotSign(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	st, err := e.c.Start(ctx, client.StartOptions{Agent: "sender"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.c.WaitApproval(ctx, st.Run)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		d    client.Decision
		want error
	}{
		{a.ID, client.Decision{Decision: "maybe"}, approvals.ErrBadDecision},
		{"nosuch", client.Decision{Decision: events.DecisionGrant}, approvals.ErrNoApproval},
		{a.ID, client.Decision{Decision: events.DecisionGrant, Hash: "not-the-hash"}, approvals.ErrWrongHash},
	} {
		if _, err := e.c.Decide(ctx, e.key, st.Run, c.id, c.d); !errors.Is(err, c.want) {
			t.Errorf("decide %s %+v: %v, want %v", c.id, c.d, err, c.want)
		}
	}
	if msgs, err := decisions.Read(ctx, e.c.Log(), st.Run, 0, 10); err != nil || len(msgs) != 0 {
		t.Errorf("decisions published: %d, %v; want none", len(msgs), err)
	}
	if _, err := e.c.Decide(ctx, e.key, "no-such-run", a.ID, client.Decision{Decision: events.DecisionGrant}); !errors.Is(err, client.ErrNoRun) {
		t.Errorf("decide on a run that does not exist: %v, want ErrNoRun", err)
	}
}

// TestClient_CancelEndsTheRun: a waiting run cancelled ends CANCELLED
// (Wait says it has no answer), and a second cancel is ErrEnded.
func TestClient_CancelEndsTheRun(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	st, err := e.c.Start(ctx, client.StartOptions{Agent: "sender"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.WaitApproval(ctx, st.Run); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Cancel(ctx, st.Run, "changed my mind"); err != nil {
		t.Fatal(err)
	}
	r, err := e.c.Wait(ctx, st.Run)
	if !errors.Is(err, client.ErrNoAnswer) || r.Status != projector.Cancelled || r.Detail != "changed my mind" {
		t.Errorf("after cancel: %s %q, %v; want CANCELLED with the reason and ErrNoAnswer", r.Status, r.Detail, err)
	}
	if err := e.c.Cancel(ctx, st.Run, "again"); !errors.Is(err, client.ErrEnded) {
		t.Errorf("second cancel: %v, want ErrEnded", err)
	}
	if _, err := e.c.WaitApproval(ctx, st.Run); !errors.Is(err, client.ErrEnded) {
		t.Errorf("wait for an approval of an ended run: %v, want ErrEnded", err)
	}
}

// TestClient_WatchEndsAndFollow: a watcher from the start sees every run
// end with its result; one from now sees only runs that end after it
// began; Follow hands every event of a run up to its end.
func TestClient_WatchEndsAndFollow(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	want := map[string]string{}
	for i := range 2 {
		st, err := e.c.Start(ctx, client.StartOptions{Agent: "answerer", Input: json.RawMessage(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.Wait(ctx, st.Run); err != nil {
			t.Fatal(err)
		}
		want[st.Run] = fmt.Sprintf("echo %d", i)
	}
	before := map[string]bool{}
	for id := range want {
		before[id] = true
	}
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() {
		watched <- e.c.WatchEnds(wctx, true, func(x client.End) error {
			if x.Err != nil || x.Kind != events.RunFinished || x.Body.Result != want[x.Run] {
				t.Errorf("end %+v, want run.finished with %q", x, want[x.Run])
			}
			if delete(want, x.Run); len(want) == 0 {
				stop()
			}
			return nil
		})
	}()
	if err := <-watched; err != nil || len(want) != 0 {
		t.Fatalf("WatchEnds from the start: %v, not seen: %v", err, want)
	}

	// From now: the runs that ended before are never handed; runs started
	// after are (started until one is seen: the watcher takes its starting
	// point when it begins).
	nctx, nstop := context.WithCancel(ctx)
	seen := make(chan client.End, 16)
	go func() { watched <- e.c.WatchEnds(nctx, false, func(x client.End) error { seen <- x; return nil }) }()
	var got client.End
	for try := 0; got.Run == "" && try < 10; try++ {
		if _, err := e.c.Start(ctx, client.StartOptions{Agent: "answerer"}); err != nil {
			t.Fatal(err)
		}
		select {
		case got = <-seen:
		case <-time.After(time.Second):
		}
	}
	nstop()
	if err := <-watched; err != nil || got.Run == "" || before[got.Run] {
		t.Fatalf("WatchEnds from now: first end %+v, %v; want a run started after it began", got, err)
	}

	st, err := e.c.Start(ctx, client.StartOptions{Agent: "answerer"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	if err := e.c.Follow(ctx, st.Run, events.Tail{}, func(r events.Record) error { kinds = append(kinds, string(r.Event.Kind)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(kinds) < 2 || kinds[0] != string(events.RunCreated) || kinds[len(kinds)-1] != string(events.RunFinished) {
		t.Errorf("followed %v, want run.created … run.finished", kinds)
	}
}

// TestClient_ListNewestFirst: the listing holds the client's runs, newest
// first, filtered by status; a bad filter is ErrBadFilter.
func TestClient_ListNewestFirst(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	var ids []string
	for range 3 {
		st, err := e.c.Start(ctx, client.StartOptions{Agent: "answerer"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.c.Wait(ctx, st.Run); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.Run)
	}
	p, err := e.c.List(ctx, client.Filter{Status: projector.Completed}, "", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rows) != 2 || p.Rows[0].ID != ids[2] || p.Rows[1].ID != ids[1] || p.Next == "" {
		t.Fatalf("first page: %+v", p)
	}
	p, err = e.c.List(ctx, client.Filter{Status: projector.Completed}, p.Next, 2, 0)
	if err != nil || len(p.Rows) != 1 || p.Rows[0].ID != ids[0] || p.Next != "" {
		t.Fatalf("second page: %+v, %v", p, err)
	}
	if _, err := e.c.List(ctx, client.Filter{Status: "DONE"}, "", 2, 0); !errors.Is(err, client.ErrBadFilter) {
		t.Errorf("unknown status: %v, want ErrBadFilter", err)
	}
}

// TestConfig_Validate names what is wrong.
func TestConfig_Validate(t *testing.T) {
	for _, c := range []struct {
		cfg  client.Config
		want string
	}{
		{client.Config{Poll: -time.Second}, "poll"},
		{client.Config{Fleet: fleet.Config{Replicas: 9}}, "replicas 9"},
		{client.Config{Log: events.Config{Shards: -1}}, "shards"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", c.cfg, err, c.want)
		}
	}
	if err := (client.Config{}).Validate(); err != nil {
		t.Errorf("the zero config: %v", err)
	}
}

// TestClient_BrokenRunIsNeverShownInPart: a run with a message on its
// subjects that is not its next event is ErrBroken to every read, to Wait
// and to Decide (nothing is signed), and Approvals reports it instead of
// hiding it.
func TestClient_BrokenRunIsNeverShownInPart(t *testing.T) {
	e := newEnv(t)
	ctx := ctx10(t)
	st, err := e.c.Start(ctx, client.StartOptions{Agent: "sender"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.c.WaitApproval(ctx, st.Run)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Log().JetStream().Publish(ctx, e.c.Log().Subject(st.Run, events.StepObserved), []byte(`{"not":"an event"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.View(ctx, st.Run); !errors.Is(err, client.ErrBroken) {
		t.Errorf("View: %v, want ErrBroken", err)
	}
	if _, err := e.c.Wait(ctx, st.Run); !errors.Is(err, client.ErrBroken) {
		t.Errorf("Wait: %v, want ErrBroken", err)
	}
	if _, err := e.c.Grant(ctx, e.key, st.Run, a.ID, "ok"); !errors.Is(err, client.ErrBroken) {
		t.Errorf("Grant: %v, want ErrBroken", err)
	}
	if msgs, err := decisions.Read(ctx, e.c.Log(), st.Run, 0, 10); err != nil || len(msgs) != 0 {
		t.Errorf("decisions published on a broken run: %d, %v", len(msgs), err)
	}
	list, err := e.c.Approvals(ctx)
	if err != nil || len(list) != 1 || list[0].Run != st.Run || !errors.Is(list[0].Err, client.ErrBroken) {
		t.Errorf("approvals: %+v, %v; want the broken run reported", list, err)
	}
}
