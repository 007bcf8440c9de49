package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// client is one NATS user's connection, with the asynchronous errors the
// server sent it (a refused publish arrives that way).
type client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	mu   sync.Mutex
	errs []error
}

// connect connects user over TCP to srv, as a separate process would.
func connect(t *testing.T, srv *embedded.Server, user, password string) *client {
	t.Helper()
	c := &client{}
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, password), nats.Name("test-"+user), embedded.InboxOption(user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.errs = append(c.errs, err)
			c.mu.Unlock()
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream as %s: %v", user, err)
	}
	c.nc, c.js = nc, js
	return c
}

// violations returns the permission violations the server reported so far.
func (c *client) violations() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []error
	for _, err := range c.errs {
		if errors.Is(err, nats.ErrPermissionViolation) {
			out = append(out, err)
		}
	}
	return out
}

// wantViolation waits for the server to report one more permission
// violation than before (the count handed in).
func (c *client) wantViolation(t *testing.T, before int, what string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for len(c.violations()) <= before {
		if time.Now().After(deadline) {
			c.mu.Lock()
			errs := c.errs
			c.mu.Unlock()
			t.Fatalf("%s: no permissions violation reported by the server after 3s (async errors: %v)", what, errs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// authEnv is an embedded server with the worker and operator users, the
// runs log and the fleet's queue created by the worker, and one run paused
// on a remote_mutation approval.
type authEnv struct {
	srv      *embedded.Server
	worker   *client
	operator *client
	log      *events.Log // the worker's
	d        *driver.Driver
	send     *testkit.Ledger
	opKey    nkeys.KeyPair
	run      string
}

const sendSchema = `{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`

func newAuthEnv(t *testing.T, cfg events.Config) *authEnv {
	t.Helper()
	creds := embedded.Credentials{Worker: "w", Operator: "o"}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, Users: creds.Users(embedded.Subjects{Shards: cfg.Shards})})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(srv.Stop)
	e := &authEnv{srv: srv, worker: connect(t, srv, "worker", creds.Worker), operator: connect(t, srv, "operator", creds.Operator)}
	ctx := t.Context()
	if e.log, err = events.Open(ctx, e.worker.js, cfg); err != nil {
		t.Fatalf("open log as worker: %v", err)
	}
	if _, err := fleet.Setup(ctx, e.worker.js, fleet.Config{}); err != nil {
		t.Fatalf("set up fleet as worker: %v", err)
	}
	e.opKey, err = nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := e.opKey.PublicKey()
	e.send = testkit.NewLedger("send", events.RemoteMutation, sendSchema)
	e.d, err = driver.New(driver.Config{
		Log: e.log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"),
		Tools:     []driver.Tool{e.send, testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()},
		Operators: approvals.Operators{pub: "alice"},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.run = "run-" + events.NewID()
	r, err := e.d.Create(ctx, e.run, "s", nil)
	if err != nil {
		t.Fatalf("create run as worker: %v", err)
	}
	if err := e.d.Drive(ctx, r, e.agent()); err != nil {
		t.Fatalf("drive as worker: %v", err)
	}
	if st := r.View().Run.Status; st != projector.Waiting {
		t.Fatalf("run status %s, want %s", st, projector.Waiting)
	}
	return e
}

func (e *authEnv) agent() driver.Agent {
	return testkit.NewScript(testkit.Call("send", `{"to":"ops"}`), testkit.Call("done", `{}`))
}

// msgs is the number of messages on the run's stream, as the worker sees it.
func (e *authEnv) msgs(t *testing.T) uint64 {
	t.Helper()
	s, err := e.worker.js.Stream(t.Context(), e.log.StreamName(e.log.Shard(e.run)))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// attach opens the existing log over c's connection.
func (e *authEnv) attach(t *testing.T, c *client) *events.Log {
	t.Helper()
	l, err := events.Attach(t.Context(), c.js, e.log.Config())
	if err != nil {
		t.Fatalf("attach log: %v", err)
	}
	return l
}

// pendingApproval reads the run as the worker and returns its approval.
func (e *authEnv) pendingApproval(t *testing.T) (projector.Approval, events.Tail) {
	t.Helper()
	r, err := e.d.Load(t.Context(), e.run)
	if err != nil {
		t.Fatal(err)
	}
	v := r.View()
	a := v.PendingApproval()
	if a == nil {
		t.Fatalf("run %s has no pending approval (status %s)", e.run, v.Run.Status)
	}
	return *a, r.Tail()
}

// refusedAppend appends ev through l, expecting the server to drop it: the
// append must fail (it gets no acknowledgement), the client must be told of
// a permissions violation, and the stream must not grow.
func (e *authEnv) refusedAppend(t *testing.T, c *client, l *events.Log, ev events.Event) {
	t.Helper()
	tail, err := e.log.Tail(t.Context(), e.run)
	if err != nil {
		t.Fatal(err)
	}
	before, n := len(c.violations()), e.msgs(t)
	ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
	defer cancel()
	if _, err := l.Append(ctx, tail, ev); err == nil {
		t.Fatalf("append %s: succeeded, want it refused", ev.Kind)
	} else if errors.Is(err, events.ErrConflict) {
		t.Fatalf("append %s: %v, want a refusal, not a lost race", ev.Kind, err)
	}
	c.wantViolation(t, before, "append "+string(ev.Kind))
	if got := e.msgs(t); got != n {
		t.Errorf("stream holds %d messages after the refused %s, want %d", got, ev.Kind, n)
	}
}

func newEvent(t *testing.T, run string, k events.Kind, body any) events.Event {
	t.Helper()
	ev, err := events.New(run, k, body)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestPermissions_OperatorCannotPublishRunEvent(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	opLog := e.attach(t, e.operator)
	a, _ := e.pendingApproval(t)
	// The write-ahead record of an execution: the one event an operator
	// must never be able to write.
	allow := events.PolicyBody{Step: 1, Outcome: projector.Allow, Reason: "operator says so", Args: []byte(`{"to":"all"}`)}
	e.refusedAppend(t, e.operator, opLog, newEvent(t, e.run, events.StepPolicy, allow))

	others := []struct {
		kind events.Kind
		body any
	}{
		{events.StepDecided, events.StepDecidedBody{Step: 2, Tool: "send", Args: `{"to":"all"}`}},
		{events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "sent"}},
		{events.ApprovalRequested, events.PolicyBody{Step: 1, Outcome: projector.RequireApproval, Approval: &a.ApprovalRequest}},
		{events.ApprovalExpired, events.ExpiredBody{Approval: a.ID}},
		{events.ApprovalRefused, events.RefusedBody{Approval: a.ID, Event: "x", Reason: "r"}},
		{events.RunTools, events.RunToolsBody{}},
		{events.RunFinished, events.EndBody{Reason: events.ReasonCompleted}},
		{events.RunFailed, events.EndBody{Reason: events.ReasonInternalError}},
		{events.RunCancelled, events.EndBody{Reason: events.ReasonCancelled}},
	}
	for _, o := range others {
		t.Run(string(o.kind), func(t *testing.T) {
			e.refusedAppend(t, e.operator, opLog, newEvent(t, e.run, o.kind, o.body))
		})
	}
	t.Run("new run", func(t *testing.T) {
		before := len(e.operator.violations())
		ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
		defer cancel()
		ev := newEvent(t, "run-by-operator", events.RunCreated, events.RunCreatedBody{Agent: "x"})
		if _, err := opLog.Append(ctx, events.Tail{}, ev); err == nil {
			t.Fatal("operator created a run, want it refused")
		}
		e.operator.wantViolation(t, before, "create run")
	})
}

func TestPermissions_WorkerCannotPublishGrant(t *testing.T) {
	for _, shards := range []int{1, 3} {
		t.Run(map[int]string{1: "one shard", 3: "three shards"}[shards], func(t *testing.T) {
			e := newAuthEnv(t, events.Config{Shards: shards})
			a, _ := e.pendingApproval(t)
			// Even a grant properly signed by the configured operator's
			// key: the worker user may not publish it.
			for _, decision := range []string{events.Grant, events.Deny} {
				d, err := approvals.Sign(e.opKey, e.run, a.ID, a.Hash, decision, "", time.Now())
				if err != nil {
					t.Fatal(err)
				}
				k := events.ApprovalGranted
				if decision == events.Deny {
					k = events.ApprovalDenied
				}
				e.refusedAppend(t, e.worker, e.log, newEvent(t, e.run, k, d))
			}
			if _, tail := e.pendingApproval(t); tail.Count != 3 {
				t.Errorf("run has %d events, want 3 (created, decided, approval requested)", tail.Count)
			}
		})
	}
}

func TestPermissions_OperatorCanGrantAndRead(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	ctx := t.Context()
	opLog := e.attach(t, e.operator)

	// Read the run, as `arbiter show` does.
	recs, tail, err := opLog.Read(ctx, e.run)
	if err != nil {
		t.Fatalf("read as operator: %v", err)
	}
	evs := make([]events.Event, len(recs))
	for i, r := range recs {
		evs[i] = r.Event
	}
	v, err := projector.Fold(evs...)
	if err != nil {
		t.Fatal(err)
	}
	a := v.PendingApproval()
	if a == nil || a.State != projector.Pending {
		t.Fatalf("operator sees no pending approval (status %s)", v.Run.Status)
	}
	if got, _ := opLog.Tail(ctx, e.run); got != tail {
		t.Errorf("operator tail = %+v, want %+v", got, tail)
	}

	// Watch approvals on a durable subscription, as `arbiter watch` does.
	wctx, stop := context.WithCancel(ctx)
	seen := make(chan events.Kind, 16)
	watched := make(chan error, 1)
	go func() {
		watched <- approvals.Watch(wctx, opLog, "operator-test", func(n approvals.Notice) error {
			seen <- n.Event.Kind
			return nil
		})
	}()
	select {
	case k := <-seen:
		if k != events.ApprovalRequested {
			t.Errorf("operator's watch saw %s first, want %s", k, events.ApprovalRequested)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("operator's watch delivered nothing in 5s")
	}

	// Grant, fenced on the tail, and nudge the fleet.
	d, err := approvals.Sign(e.opKey, e.run, a.ID, a.Hash, events.Grant, "ok", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opLog.Append(ctx, tail, newEvent(t, e.run, events.ApprovalGranted, d)); err != nil {
		t.Fatalf("operator grant: %v", err)
	}
	if err := fleet.NewQueue(e.operator.js, fleet.Config{}).Nudge(ctx, e.run, "decided"); err != nil {
		t.Fatalf("operator nudge: %v", err)
	}
	select {
	case k := <-seen:
		if k != events.ApprovalGranted {
			t.Errorf("operator's watch saw %s, want %s", k, events.ApprovalGranted)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("operator's watch did not deliver the grant in 5s")
	}
	stop()
	if err := <-watched; err != nil {
		t.Errorf("watch as operator: %v", err)
	}
	if got := e.operator.violations(); len(got) != 0 {
		t.Errorf("operator's reads, grant, nudge and watch drew permission violations: %v", got)
	}

	// The nudge is on the work queue, and the worker acts on the grant.
	ws, err := e.worker.js.Stream(ctx, "ARB_WORK")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.GetLastMsgForSubject(ctx, "arb.work."+e.run); err != nil {
		t.Errorf("no nudge for %s on the work queue: %v", e.run, err)
	}
	r, err := e.d.Load(ctx, e.run)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.Drive(ctx, r, e.agent()); err != nil {
		t.Fatalf("drive after grant: %v", err)
	}
	if got := r.View().Run.Status; got != projector.Completed {
		t.Errorf("run status %s after the grant, want %s", got, projector.Completed)
	}
	if got := e.send.Count(); got != 1 {
		t.Errorf("send executed %d times, want 1", got)
	}
}

func TestPermissions_OperatorCannotManageStreams(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	stream := e.log.StreamName(0)
	n := e.msgs(t)
	tests := []struct {
		name string
		do   func(ctx context.Context, js jetstream.JetStream) error
	}{
		{"create stream", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OPS", Subjects: []string{"ops.>"}})
			return err
		}},
		{"delete runs stream", func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteStream(ctx, stream)
		}},
		{"update runs stream", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"arb.run.>"}, MaxMsgs: 1})
			return err
		}},
		{"purge runs stream", func(ctx context.Context, js jetstream.JetStream) error {
			s, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		}},
		{"delete a run event", func(ctx context.Context, js jetstream.JetStream) error {
			s, err := js.Stream(ctx, stream)
			if err != nil {
				return err
			}
			return s.DeleteMsg(ctx, 1)
		}},
		{"delete snapshot bucket", func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteKeyValue(ctx, "ARB_VIEWS")
		}},
		{"write a snapshot", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.Publish(ctx, "$KV.ARB_VIEWS."+e.run, []byte(`{}`))
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e.operator.violations())
			ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
			defer cancel()
			if err := tt.do(ctx, e.operator.js); err == nil {
				t.Fatalf("operator could %s", tt.name)
			}
			e.operator.wantViolation(t, before, tt.name)
		})
	}
	names := e.worker.js.StreamNames(t.Context())
	var got []string
	for name := range names.Name() {
		got = append(got, name)
	}
	if len(got) != 3 {
		t.Errorf("streams after the operator's attempts: %v, want the runs stream, the work queue and the bucket", got)
	}
	if got := e.msgs(t); got != n {
		t.Errorf("runs stream holds %d messages, want %d", got, n)
	}
}

// TestServerConf_MirrorsEmbeddedPermissions loads docs/nats-server.conf, the
// production server config, and holds its users to the embedded default's:
// the two cannot drift apart unnoticed. It then starts a server from it.
func TestServerConf_MirrorsEmbeddedPermissions(t *testing.T) {
	const conf = "../docs/nats-server.conf"
	t.Setenv("ARBITER_WORKER_PASSWORD", "w-secret")
	t.Setenv("ARBITER_OPERATOR_PASSWORD", "o-secret")
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("load %s: %v", conf, err)
	}
	want := embedded.Credentials{Worker: "w-secret", Operator: "o-secret"}.Users(embedded.Subjects{})
	if len(opts.Users) != len(want) {
		t.Fatalf("%s has %d users, want %d", conf, len(opts.Users), len(want))
	}
	for i, w := range want {
		got := opts.Users[i]
		if got.Username != w.Username || got.Password != w.Password {
			t.Errorf("user %d = %s/%s, want %s/%s", i, got.Username, got.Password, w.Username, w.Password)
		}
		if !reflect.DeepEqual(got.Permissions, w.Permissions) {
			t.Errorf("%s permissions in %s:\n got %s\nwant %s", w.Username, conf, permString(got.Permissions), permString(w.Permissions))
		}
	}
	if !opts.JetStream {
		t.Errorf("%s does not enable JetStream", conf)
	}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, ConfigFile: conf})
	if err != nil {
		t.Fatalf("start from %s: %v", conf, err)
	}
	t.Cleanup(srv.Stop)
	c := connect(t, srv, "operator", "o-secret")
	if _, err := c.js.AccountInfo(t.Context()); err != nil {
		t.Errorf("operator account info on a server from %s: %v", conf, err)
	}
	if _, err := nats.Connect(srv.ClientURL(), nats.UserInfo("operator", "wrong")); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("connect with a wrong password = %v, want %v", err, nats.ErrAuthorization)
	}
}

func permString(p *server.Permissions) string {
	if p == nil {
		return "<nil>"
	}
	s := func(sp *server.SubjectPermission) string {
		if sp == nil {
			return "<nil>"
		}
		return fmt.Sprintf("allow %q deny %q", sp.Allow, sp.Deny)
	}
	return "publish " + s(p.Publish) + "; subscribe " + s(p.Subscribe)
}

// TestPermissions_OperatorGarbageFailsClosed: what the operator user can
// store on a decision subject, it can store unfenced and malformed. The run
// then cannot be read, and nothing of it executes.
func TestPermissions_OperatorGarbageFailsClosed(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	opLog := e.attach(t, e.operator)
	if _, err := e.operator.js.Publish(t.Context(), opLog.Subject(e.run, events.ApprovalGranted), []byte(`{"not":"an event"}`)); err != nil {
		t.Fatalf("operator publish on the decision subject: %v", err)
	}
	if _, err := e.d.Load(t.Context(), e.run); !errors.Is(err, events.ErrMalformed) {
		t.Fatalf("worker load = %v, want %v", err, events.ErrMalformed)
	}
	q, err := fleet.Setup(t.Context(), e.worker.js, fleet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: e.d, Queue: q, Agents: map[string]driver.Agent{"": e.agent()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	if err := q.Nudge(t.Context(), e.run, "after-garbage"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	cancel()
	<-done
	if got := e.send.Count(); got != 0 {
		t.Errorf("send executed %d times on an unreadable run, want 0", got)
	}
}
