package embedded_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/arbiter-run/arbiter/approvals"
	arbclient "github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// takeID has the operator user store an empty message under message id
// id on a work subject of its own choosing (a run that does not exist),
// as anyone who may nudge can, and checks the server took the id.
func (e *authEnv) takeID(t *testing.T, id string) {
	t.Helper()
	ack, err := e.operator.js.PublishMsg(t.Context(), &nats.Msg{Subject: e.q.Config().WorkPrefix + ".decoy-" + events.NewID()}, jetstream.WithMsgID(id))
	if err != nil {
		t.Fatalf("take message id %s as operator: %v", id, err)
	}
	if ack.Duplicate {
		t.Fatalf("message id %s was taken already", id)
	}
}

// TestPermissions_AMessageIDTakenFirstLosesNoNudge: a message id is unique
// in the whole work stream, not on its subject, and the ids of the nudges
// that move a waiting run are made of what the operator user can read (a
// decision's sequence in the decisions stream, an approval's id). With
// such an id taken first, on another run's subject, the server used to
// take the real nudge for a duplicate and drop it: the operator's grant
// was published and never taken in, and an approval never expired, the
// run waiting for a look that never came. Each subtest fails that way
// when the queue believes a duplicate.
func TestPermissions_AMessageIDTakenFirstLosesNoNudge(t *testing.T) {
	t.Run("the nudge of a grant", func(t *testing.T) {
		e := newAuthEnv(t, events.Config{})
		ctx := t.Context()
		e.runWorker(t, e.d)
		a, _ := e.pendingApproval(t)
		op, err := arbclient.Attach(ctx, e.operator.js, arbclient.Config{Log: e.log.Config()})
		if err != nil {
			t.Fatal(err)
		}
		// The grant will be the decisions stream's next message: its
		// nudge's id is known before it is published.
		next := e.streamLastSeq(t, decisions.Stream(e.log)) + 1
		e.takeID(t, fmt.Sprintf("%s/decided-%d", e.run, next))
		got, err := op.Grant(ctx, e.opKey, e.run, a.ID, "ok")
		if err != nil {
			t.Fatalf("grant as operator: %v", err)
		}
		if got.Seq != next || got.Unnudged != nil {
			t.Fatalf("grant stored at %d (want %d, whose nudge id was taken), nudge error %v", got.Seq, next, got.Unnudged)
		}
		waitView(t, e.d, e.run, func(v projector.View) bool { return v.Run.Status == projector.Completed })
		if n := e.send.Count(); n != 1 {
			t.Errorf("send executed %d times, want 1", n)
		}
		e.operator.noViolations(t, "taking a nudge's id")
	})
	t.Run("an approval's expiry timer", func(t *testing.T) {
		e := newAuthEnv(t, events.Config{})
		ctx := t.Context()
		pub, _ := e.opKey.PublicKey()
		d, err := driver.New(driver.Config{
			Log: e.log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"),
			Tools:       []driver.Tool{testkit.NewLedger("send", events.RemoteMutation, sendSchema), testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()},
			Operators:   approvals.Operators{pub: "alice"},
			ApprovalTTL: 2 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		run := "run-expiry-" + events.NewID()
		r, err := d.Create(ctx, run, "s", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Drive(ctx, r, e.agent()); err != nil {
			t.Fatal(err)
		}
		rv := r.View()
		a := rv.PendingApproval()
		if a == nil || a.ExpiresAt == nil {
			t.Fatalf("run %s has no approval with an expiry: %+v", run, rv.Run)
		}
		// The operator reads the approval's id and takes its timer's id
		// before any worker looks at the run; a worker that looks arms
		// the timer, which the approval's expiry needs: nothing else
		// nudges the run.
		e.takeID(t, run+"/expiry/"+a.ID)
		e.runWorker(t, d)
		if err := fleet.NewQueue(e.operator.js, fleet.Config{}).Nudge(ctx, run, "look"); err != nil {
			t.Fatal(err)
		}
		v := waitView(t, d, run, func(v projector.View) bool { return v.Run.Status.Ended() })
		if v.Run.Status != projector.Cancelled || v.Run.Reason != string(events.ReasonApprovalExpired) {
			t.Fatalf("run %s ended %s (%s), want cancelled as %s", run, v.Run.Status, v.Run.Reason, events.ReasonApprovalExpired)
		}
		e.operator.noViolations(t, "taking a timer's id")
	})
}
