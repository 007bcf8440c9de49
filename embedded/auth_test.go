package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// client is one NATS user's connection, with the asynchronous errors the
// server sent it (a refused publish arrives that way).
type client struct {
	user string
	nc   *nats.Conn
	js   jetstream.JetStream
	mu   sync.Mutex
	errs []error
}

// connect connects user over TCP to srv, as a separate process would.
func connect(t *testing.T, srv *embedded.Server, user, password string) *client {
	t.Helper()
	c := &client{user: user}
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
			t.Fatalf("%s as %s: no permissions violation reported by the server after 3s (%d before)", what, c.user, before)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// noViolations fails the test if the server refused anything c did.
func (c *client) noViolations(t *testing.T, what string) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := c.violations(); len(got) != 0 {
		t.Errorf("%s drew permission violations for %s: %v", what, c.user, got)
	}
}

// refusedPublish publishes data on subject with headers h (nil: none),
// asking for a reply as a JetStream publish does, and expects the server to
// refuse it.
func (c *client) refusedPublish(t *testing.T, subject string, h nats.Header, data []byte) {
	t.Helper()
	before := len(c.violations())
	m := &nats.Msg{Subject: subject, Reply: c.nc.NewRespInbox(), Header: h, Data: data}
	if err := c.nc.PublishMsg(m); err != nil {
		t.Fatalf("publish %s as %s: %v", subject, c.user, err)
	}
	c.wantViolation(t, before, "publish on "+subject)
}

// refused runs do, a JetStream call, expecting the server to refuse its
// request: do fails and the client is told of a permissions violation.
func (c *client) refused(t *testing.T, what string, do func(ctx context.Context, js jetstream.JetStream) error) {
	t.Helper()
	before := len(c.violations())
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Millisecond)
	defer cancel()
	if err := do(ctx, c.js); err == nil {
		t.Fatalf("%s as %s: succeeded, want it refused", what, c.user)
	}
	c.wantViolation(t, before, what)
}

// authEnv is an embedded server with the worker, operator and admin users,
// the runs log and the fleet's queue set up by the admin, and one run,
// driven by the worker user, paused on a remote_mutation approval.
type authEnv struct {
	srv      *embedded.Server
	worker   *client
	operator *client
	admin    *client
	log      *events.Log // the worker's
	q        *fleet.Queue
	snaps    *fleet.Snapshots
	d        *driver.Driver
	send     *testkit.Ledger
	opKey    nkeys.KeyPair
	run      string
}

const sendSchema = `{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`

var creds = embedded.Credentials{Worker: "w", Operator: "o", Admin: "a"}

func newAuthEnv(t *testing.T, cfg events.Config) *authEnv {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, Users: creds.Users(embedded.Subjects{Shards: cfg.Shards})})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(srv.Stop)
	e := &authEnv{
		srv:    srv,
		worker: connect(t, srv, "worker", creds.Worker), operator: connect(t, srv, "operator", creds.Operator),
		admin: connect(t, srv, "admin", creds.Admin),
	}
	ctx := t.Context()
	if _, err := events.Open(ctx, e.admin.js, cfg); err != nil {
		t.Fatalf("open log as admin: %v", err)
	}
	if _, _, err := fleet.Setup(ctx, e.admin.js, fleet.Config{}); err != nil {
		t.Fatalf("set up fleet as admin: %v", err)
	}
	if e.log, err = events.Attach(ctx, e.worker.js, cfg); err != nil {
		t.Fatalf("attach log as worker: %v", err)
	}
	if e.q, e.snaps, err = fleet.Attach(ctx, e.worker.js, fleet.Config{}); err != nil {
		t.Fatalf("attach fleet as worker: %v", err)
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

// state is what the users' attempts must leave alone: every stream's
// configuration and message count, and every consumer's configuration.
func (e *authEnv) state(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	var out string
	for name := range e.admin.js.StreamNames(ctx).Name() {
		s, err := e.admin.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out += fmt.Sprintf("stream %s: msgs %d last %d config %+v\n", name, info.State.Msgs, info.State.LastSeq, info.Config)
		for c := range s.ListConsumers(ctx).Info() {
			out += fmt.Sprintf("  consumer %s: %+v\n", c.Name, c.Config)
		}
	}
	return out
}

// unchanged fails the test when the server's state differs from before.
func (e *authEnv) unchanged(t *testing.T, before string) {
	t.Helper()
	if got := e.state(t); got != before {
		t.Errorf("server state changed:\nbefore\n%s\nafter\n%s", before, got)
	}
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

func newEvent(t *testing.T, run string, k events.Kind, body any) events.Event {
	t.Helper()
	ev, err := events.New(run, k, body)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// fenced are the headers of a fenced append of ev at tail on l (what
// events.Log.Append sends).
func fenced(l *events.Log, ev events.Event, tail events.Tail) nats.Header {
	h := nats.Header{}
	h.Set(jetstream.MsgIDHeader, ev.ID)
	h.Set(jetstream.ExpectedLastSubjSeqHeader, fmt.Sprint(tail.Seq))
	h.Set(jetstream.ExpectedLastSubjSeqSubjHeader, l.RunFilter(ev.Run))
	return h
}

var shardCases = []int{1, 3}

func shardName(k int) string { return fmt.Sprintf("%d shard(s)", k) }

// TestLoadCredentials_CreatesThreeUsersOnce: the first call writes the
// worker's, the operator's and the admin's password (mode 0600, distinct);
// later calls read the same ones back.
func TestLoadCredentials_CreatesThreeUsersOnce(t *testing.T) {
	dir := t.TempDir()
	first, err := embedded.LoadCredentials(dir)
	if err != nil {
		t.Fatal(err)
	}
	if first.Worker == "" || first.Operator == "" || first.Admin == "" ||
		first.Worker == first.Operator || first.Operator == first.Admin || first.Worker == first.Admin {
		t.Fatalf("credentials %+v: want three distinct passwords", first)
	}
	for _, u := range []string{"worker", "operator", "admin"} {
		fi, err := os.Stat(filepath.Join(dir, "credentials", u+".password"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.password has mode %v, want 0600", u, fi.Mode().Perm())
		}
	}
	again, err := embedded.LoadCredentials(dir)
	if err != nil || again != first {
		t.Errorf("second load = %+v, %v; want %+v", again, err, first)
	}
}
