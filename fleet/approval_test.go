package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

const sendSchema = `{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`

// approvalFleet is one embedded JetStream shared by workers that each have
// their own connection, log handle, driver and queue, as separate processes
// would; every driver has the same config and the same ledger tools.
type approvalFleet struct {
	js    *testkit.JS
	cfg   driver.Config // without Log
	send  *testkit.Ledger
	done  *testkit.Ledger
	kp    nkeys.KeyPair
	agent driver.Agent
}

func newApprovalFleet(t *testing.T, ttl time.Duration) *approvalFleet {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	f := &approvalFleet{
		js:   testkit.JetStream(t),
		send: testkit.NewLedger("send", events.RemoteMutation, sendSchema),
		done: testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal(),
		kp:   kp,
	}
	f.cfg = driver.Config{
		Policy: policy.WithID(policy.DefaultSideEffects(), "side-effects v1"),
		Tools:  []driver.Tool{f.send, f.done}, Operators: approvals.Operators{pub: "alice"}, ApprovalTTL: ttl,
	}
	f.agent = scripted.Agent{Decisions: []driver.Action{scripted.Call("send", `{"to":"ops"}`), scripted.Call("done", `{}`)}}
	return f
}

// member connects one more member of the fleet: its own connection, log,
// queue, snapshots and driver.
func (f *approvalFleet) member(t *testing.T) (*driver.Driver, *fleet.Queue, *fleet.Snapshots) {
	t.Helper()
	nc, err := f.js.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	member := testkit.OnConn(t, f.js.Server, nc)
	log := member.Log(t, events.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, s, err := fleet.Setup(ctx, member.JS, fleet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := f.cfg
	cfg.Log = log
	d, err := driver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d, q, s
}

// workers starts n workers, each a member of its own, until the test ends.
func (f *approvalFleet) workers(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		d, q, s := f.member(t)
		w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: q, Snapshots: s, Agents: map[string]driver.Agent{"": f.agent}, Concurrency: 4})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// waitFor polls run until cond holds, for at most within.
func waitFor(t *testing.T, d *driver.Driver, run string, within time.Duration, what string, cond func(projector.View) bool) projector.View {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		r, err := d.Load(context.Background(), run)
		if err == nil && cond(r.View()) {
			return r.View()
		}
		if time.Now().After(deadline) {
			st := fmt.Sprintf("load error %v", err)
			if err == nil {
				v := r.View()
				st = fmt.Sprintf("status %s %s", v.Run.Status, v.Run.Reason)
			}
			t.Fatalf("run %s: not %s after %s (%s)", run, what, within, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waiting(v projector.View) bool {
	a := v.PendingApproval()
	return v.Run.Status == projector.Waiting && a != nil && a.State == projector.Pending
}

// grant signs and records a grant of the approval run waits on.
func (f *approvalFleet) grant(t *testing.T, log *events.Log, run string, a projector.Approval) {
	t.Helper()
	if _, err := client.New(log, nil).Decide(t.Context(), f.kp, run, a.ID, client.Decision{Decision: events.DecisionGrant, Reason: "checked", Hash: a.Hash}); err != nil {
		t.Fatalf("grant: %v", err)
	}
}

// consumers returns the policy results that consumed a grant.
func consumers(t *testing.T, log *events.Log, run string) []events.PolicyBody {
	t.Helper()
	recs, _, err := log.Read(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.PolicyBody
	for _, r := range recs {
		if r.Event.Kind != events.StepPolicy {
			continue
		}
		b, err := events.DecodeBody[events.PolicyBody](r.Event)
		if err != nil {
			t.Fatal(err)
		}
		if b.Consumes != "" {
			out = append(out, b)
		}
	}
	return out
}

func TestFleet_SixteenWorkersExecuteGrantOnce(t *testing.T) {
	f := newApprovalFleet(t, 0)
	f.workers(t, 16)
	d, q, _ := f.member(t)
	const run = "run-granted-once"
	if err := q.Start(t.Context(), d, run, "script", nil); err != nil {
		t.Fatal(err)
	}
	v := waitFor(t, d, run, 20*time.Second, "waiting on its approval", waiting)
	if got := f.send.Count(); got != 0 {
		t.Fatalf("send executed %d times before the grant, want 0", got)
	}
	a := *v.PendingApproval()

	f.grant(t, d.Log(), run, a)
	// Every member nudges, as an over-eager operator tool might: the queue
	// keeps one nudge per run, and the fence keeps one resume.
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := q.Nudge(t.Context(), run, fmt.Sprintf("decided-%d", i)); err != nil {
				t.Errorf("nudge %d: %v", i, err)
			}
		}()
	}
	wg.Wait()

	v = waitFor(t, d, run, 20*time.Second, "completed", func(v projector.View) bool { return v.Run.Status.Ended() })
	if v.Run.Status != projector.Completed {
		t.Fatalf("run ended %s %s (%s), want %s", v.Run.Status, v.Run.Reason, v.Run.Detail, projector.Completed)
	}
	if got := f.send.Count(); got != 1 {
		t.Errorf("send executed %d times, want exactly 1", got)
	}
	if got, want := string(f.send.Calls()[0]), `{"to":"ops"}`; got != want {
		t.Errorf("send executed with %s, want the recorded request %s", got, want)
	}
	if got := f.done.Count(); got != 1 {
		t.Errorf("done executed %d times, want 1", got)
	}
	if cs := consumers(t, d.Log(), run); len(cs) != 1 || cs[0].Consumes != a.ID {
		t.Errorf("grant consumers = %+v, want one consuming %s", cs, a.ID)
	}
	if got := v.Approval(a.ID).State; got != projector.Consumed {
		t.Errorf("approval state %s, want %s", got, projector.Consumed)
	}
}

// TestFleet_SixteenConcurrentResumesExecuteOnce takes the queue away: 16
// drivers load the same granted run and drive it at the same instant. The
// fence lets exactly one consume the grant.
func TestFleet_SixteenConcurrentResumesExecuteOnce(t *testing.T) {
	f := newApprovalFleet(t, 0)
	d, _, _ := f.member(t)
	const run = "run-raced"
	r, err := d.Create(t.Context(), run, "script", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Drive(t.Context(), r, f.agent); err != nil {
		t.Fatal(err)
	}
	v := r.View()
	if !waiting(v) {
		t.Fatalf("run status %s, want it waiting on a pending approval", v.Run.Status)
	}
	a := *v.PendingApproval()
	f.grant(t, d.Log(), run, a)
	// Record it as the worker that reads it does, so that every driver
	// below loads the approval granted and races to consume it.
	msgs, err := decisions.Read(t.Context(), d.Log(), run, 0, 1)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("published decisions: %d, %v", len(msgs), err)
	}
	dec, err := approvals.ParseDecision(msgs[0].Data)
	if err != nil {
		t.Fatal(err)
	}
	dec.Received, dec.Intake = time.Now().UTC(), msgs[0].Sequence
	ev, err := events.New(run, events.ApprovalGranted, dec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Log().Append(t.Context(), r.Tail(), ev); err != nil {
		t.Fatal(err)
	}

	const n = 16
	runs := make([]*driver.Run, n)
	drivers := make([]*driver.Driver, n)
	for i := range runs {
		drivers[i], _, _ = f.member(t)
		if runs[i], err = drivers[i].Load(t.Context(), run); err != nil {
			t.Fatal(err)
		}
		lv := runs[i].View()
		if st := lv.Approval(a.ID).State; st != projector.Granted {
			t.Fatalf("driver %d loaded approval %s, want %s", i, st, projector.Granted)
		}
	}
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = drivers[i].Drive(t.Context(), runs[i], f.agent)
		}()
	}
	close(start)
	wg.Wait()

	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, events.ErrConflict):
		default:
			t.Errorf("driver %d: %v, want nil or %v", i, err, events.ErrConflict)
		}
	}
	if won != 1 {
		t.Errorf("%d drivers finished without a conflict, want exactly 1", won)
	}
	if got := f.send.Count(); got != 1 {
		t.Errorf("send executed %d times by %d concurrent resumes, want exactly 1", got, n)
	}
	if cs := consumers(t, d.Log(), run); len(cs) != 1 {
		t.Errorf("%d policy results consumed the grant, want 1", len(cs))
	}
	final, err := d.Load(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	if st := final.View().Run.Status; st != projector.Completed {
		t.Errorf("run status %s, want %s", st, projector.Completed)
	}

	// A latecomer finds the grant consumed and the run ended: nothing runs.
	late, _, _ := f.member(t)
	lr, err := late.Load(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	if err := late.Drive(t.Context(), lr, f.agent); err != nil {
		t.Errorf("late drive: %v, want nil (nothing to do)", err)
	}
	if got := f.send.Count(); got != 1 {
		t.Errorf("send executed %d times after a late drive, want 1", got)
	}
}

// TestFleet_ApprovalExpiresWithNobodyLooking: once the run pauses, nobody
// nudges it again. The expiry timer the worker left behind must still
// record the expiry and end the run.
func TestFleet_ApprovalExpiresWithNobodyLooking(t *testing.T) {
	const ttl = 300 * time.Millisecond
	f := newApprovalFleet(t, ttl)
	f.workers(t, 3)
	d, q, _ := f.member(t)
	const run = "run-expires"
	if err := q.Start(t.Context(), d, run, "script", nil); err != nil {
		t.Fatal(err)
	}
	v := waitFor(t, d, run, 10*time.Second, "waiting on its approval", func(v projector.View) bool {
		return v.Run.Status == projector.Waiting || v.Run.Status.Ended()
	})
	a := v.PendingApproval()
	if a == nil || a.ExpiresAt == nil {
		t.Fatalf("run %s %s: want a pending approval with an expiry", v.Run.Status, v.Run.Reason)
	}
	v = waitFor(t, d, run, 5*time.Second, "cancelled", func(v projector.View) bool { return v.Run.Status.Ended() })
	if v.Run.Status != projector.Cancelled || v.Run.Reason != string(events.ReasonApprovalExpired) {
		t.Fatalf("run ended %s %s, want %s %s", v.Run.Status, v.Run.Reason, projector.Cancelled, events.ReasonApprovalExpired)
	}
	if got := v.Approval(a.ID).State; got != projector.Expired {
		t.Errorf("approval state %s, want %s", got, projector.Expired)
	}
	recs, _, err := d.Log().Read(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[events.Kind]int{}
	for _, r := range recs {
		counts[r.Event.Kind]++
		if r.Event.Kind == events.ApprovalExpired && r.Event.Time.Before(*a.ExpiresAt) {
			t.Errorf("approval.expired recorded at %s, before the expiry %s", r.Event.Time, a.ExpiresAt)
		}
	}
	if counts[events.ApprovalExpired] != 1 {
		t.Errorf("%d approval.expired events, want 1", counts[events.ApprovalExpired])
	}
	for _, k := range []events.Kind{events.ApprovalDenied, events.ApprovalRefused, events.RunCancelled} {
		if counts[k] != 0 {
			t.Errorf("%d %s events, want none: an expiry is not a denial", counts[k], k)
		}
	}
	if got := f.send.Count(); got != 0 {
		t.Errorf("send executed %d times, want 0", got)
	}
}
