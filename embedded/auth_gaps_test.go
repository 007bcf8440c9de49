package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The tests in this file hold the permissions to what docs/security.md
// claims beyond "which subject may a user publish on": that an operator can
// add only decisions to a run, and cannot disturb the fleet.

// publishRaw stores ev on subject, fenced on run's tail exactly as
// events.Log.Append fences, but on a subject of the publisher's choosing.
func publishRaw(t *testing.T, c *client, l *events.Log, subject string, ev events.Event) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
	defer cancel()
	tail, err := l.Tail(ctx, ev.Run)
	if err != nil {
		t.Fatal(err)
	}
	ev.V, ev.Seq, ev.Prev = events.FormatVersion, tail.Count+1, tail.Hash
	data, err := ev.Encode()
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data},
		jetstream.WithMsgID(ev.ID), jetstream.WithExpectLastSequenceForSubject(tail.Seq, l.RunFilter(ev.Run)))
	return err
}

// TestPermissions_OperatorCannotSmuggleRunEventOnDecisionSubject: the
// operator may publish on a run's approval.granted subject. What it stores
// there must be read as a decision or not at all: a run.finished body on
// that subject must not end the run.
func TestPermissions_OperatorCannotSmuggleRunEventOnDecisionSubject(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	opLog := e.attach(t, e.operator)
	forged := newEvent(t, e.run, events.RunFinished, events.EndBody{Reason: events.ReasonCompleted, Result: "forged by the operator"})
	err := publishRaw(t, e.operator, opLog, opLog.Subject(e.run, events.ApprovalGranted), forged)
	if err != nil {
		// The server refused it: nothing to read back.
		return
	}
	_, _, err = e.log.Read(t.Context(), e.run)
	if err == nil {
		r, lerr := e.d.Load(t.Context(), e.run)
		if lerr == nil && r.View().Run.Status == projector.Completed {
			t.Fatalf("events/read.go (*Log).chained does not check that a stored event's subject is the one its kind is stored on (Log.Subject(run, kind)): " +
				"the operator user stored a run.finished event on arb.run.<run>.approval.granted and the worker read the run as COMPLETED with a result no tool produced. " +
				"The NATS permissions restrict subjects, not kinds, so this makes the operator fence hollow. Fix: in chained, refuse (ErrBrokenChain) a record whose m.Subject != l.Subject(e.Run, e.Kind); " +
				"Watch and Scan consumers should apply the same check")
		}
		t.Fatalf("read of a run holding a smuggled run.finished: nil error (load: %v), want the run refused", lerr)
	}
	if !errors.Is(err, events.ErrBrokenChain) && !errors.Is(err, events.ErrMalformed) {
		t.Errorf("read of a run holding a smuggled run.finished = %v, want %v or %v", err, events.ErrBrokenChain, events.ErrMalformed)
	}
}

// TestPermissions_WorkerCannotSmuggleGrantOnRunSubject is the same check
// the other way: the worker user may not publish approval.granted, and a
// grant it stores under step.policy must not be read as one.
func TestPermissions_WorkerCannotSmuggleGrantOnRunSubject(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	a, _ := e.pendingApproval(t)
	d, err := approvals.Sign(e.opKey, e.run, a.ID, a.Hash, events.Grant, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvent(t, e.run, events.ApprovalGranted, d)
	if err := publishRaw(t, e.worker, e.log, e.log.Subject(e.run, events.StepPolicy), ev); err != nil {
		return
	}
	_, _, err = e.log.Read(t.Context(), e.run)
	if err == nil {
		r, lerr := e.d.Load(t.Context(), e.run)
		if lerr == nil {
			v := r.View()
			if a := v.PendingApproval(); a != nil && a.State == projector.Granted {
				t.Fatalf("events/read.go (*Log).chained does not check an event's subject against its kind: " +
					"the worker user, denied approval.granted by NATS, stored a grant on arb.run.<run>.step.policy and it was read as a grant. " +
					"The operator's signature still has to verify, so this is not a forged grant, but the NATS fence the docs claim is hollow. " +
					"Fix: refuse a record whose subject is not Log.Subject(run, kind)")
			}
		}
		t.Fatalf("read of a run holding a smuggled grant: nil error (load: %v), want the run refused", lerr)
	}
	if !errors.Is(err, events.ErrBrokenChain) && !errors.Is(err, events.ErrMalformed) {
		t.Errorf("read = %v, want %v or %v", err, events.ErrBrokenChain, events.ErrMalformed)
	}
}

// TestPermissions_OperatorCannotReconfigureWorkConsumer: the operator may
// create consumers (to watch approvals), but must not be able to change the
// consumer the whole fleet takes work from.
func TestPermissions_OperatorCannotReconfigureWorkConsumer(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	cfg := fleet.NewQueue(e.worker.js, fleet.Config{}).Config()
	ctx, cancel := context.WithTimeout(t.Context(), 250*time.Millisecond)
	defer cancel()
	_, err := e.operator.js.CreateOrUpdateConsumer(ctx, cfg.WorkStream, jetstream.ConsumerConfig{
		Durable: cfg.Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: cfg.AckWait,
		MaxDeliver: -1, MaxAckPending: 100000, FilterSubject: cfg.WorkPrefix + ".nothing-ever",
	})
	c, ierr := e.worker.js.Consumer(t.Context(), cfg.WorkStream, cfg.Consumer)
	if ierr != nil {
		t.Fatal(ierr)
	}
	if got := c.CachedInfo().Config.FilterSubject; got != "" {
		t.Fatalf("embedded/auth.go OperatorPermissions allows $JS.API.CONSUMER.CREATE.> on every stream: "+
			"the operator user re-filtered the fleet's shared work consumer %s/%s to %q (update err %v), so no worker takes work any more. "+
			"Fix: allow consumer create/info/next only on the runs streams ($JS.API.CONSUMER.CREATE.<Stream>_<k>.> per shard, and the same for DURABLE.CREATE, INFO, MSG.NEXT)",
			cfg.WorkStream, cfg.Consumer, got, err)
	}
	if err == nil {
		t.Error("operator's update of the work consumer: nil error, want refused")
	}
}

// TestPermissions_OperatorCannotTakeNudges: pulling from the fleet's work
// consumer and acknowledging would make nudges vanish before any worker saw
// them.
func TestPermissions_OperatorCannotTakeNudges(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	q := fleet.NewQueue(e.worker.js, fleet.Config{})
	if err := q.Nudge(t.Context(), e.run, "test"); err != nil {
		t.Fatal(err)
	}
	cfg := q.Config()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	c, err := e.operator.js.Consumer(ctx, cfg.WorkStream, cfg.Consumer)
	if err != nil {
		return // refused: good
	}
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		return
	}
	for m := range batch.Messages() {
		if m.Ack() == nil {
			t.Fatalf("embedded/auth.go OperatorPermissions allows $JS.API.CONSUMER.MSG.NEXT.> and $JS.ACK.> on every stream: " +
				"the operator user pulled the nudge for a run from the fleet's work consumer and acknowledged it, so no worker will look at the run until something nudges it again. " +
				"Fix: allow MSG.NEXT and ACK only on the runs streams ($JS.API.CONSUMER.MSG.NEXT.<Stream>_<k>.>, $JS.ACK.<Stream>_<k>.>)")
		}
	}
}

// TestPermissions_OperatorCannotWriteToAnotherClientsInbox: replies to a
// worker's requests (publish acknowledgements, direct gets of run events)
// come to the worker's inbox. A user that may publish on any inbox can
// answer for the server.
func TestPermissions_OperatorCannotWriteToAnotherClientsInbox(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	inbox := e.worker.nc.NewRespInbox()
	sub, err := e.worker.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.worker.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.operator.nc.Publish(inbox, []byte(`{"stream":"ARB_RUNS_0","seq":999}`)); err != nil {
		t.Fatal(err)
	}
	if err := e.operator.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("embedded/auth.go gives both users publish and subscribe on _INBOX.>: the operator user delivered %q to a worker's reply inbox, "+
			"so it can answer a worker's JetStream request (a publish ack, a direct get of run events) before the server does, and read the worker's replies. "+
			"Fix: per-user inbox prefixes (nats.CustomInboxPrefix(\"_INBOX_worker\") / (\"_INBOX_operator\") in cmd/worker and cmd/arbiter), "+
			"subscribe allow only the user's own prefix, no publish on _INBOX at all, and no subscribe on $JS.>", m.Data)
	}
}

// TestPermissions_OperatorCannotWriteRunSubjectThroughPushConsumer: the
// server, not the client, publishes what a push consumer delivers, and the
// creator's publish permissions are not checked against its deliver
// subject. The operator may create consumers; this holds that it still
// cannot relay a message it stored into a run subject of another shard's
// stream. (Measured on nats-server v2.15.2: the consumer is created but never
// becomes active, because nothing the operator may subscribe to is
// interested in its deliver subject.)
func TestPermissions_OperatorCannotWriteRunSubjectThroughPushConsumer(t *testing.T) {
	e := newAuthEnv(t, events.Config{Shards: 3})
	opLog := e.attach(t, e.operator)
	ctx := t.Context()
	// A subject the operator may publish on, in another shard's stream.
	target := e.log.Shard(e.run)
	carrier := ""
	for i := 0; carrier == ""; i++ {
		if id := fmt.Sprintf("carrier-%d", i); opLog.Shard(id) != target {
			carrier = id
		}
	}
	tail, err := opLog.Tail(ctx, e.run)
	if err != nil {
		t.Fatal(err)
	}
	forged := newEvent(t, e.run, events.RunFinished, events.EndBody{Reason: events.ReasonCompleted, Result: "forged through a push consumer"})
	forged.Seq, forged.Prev = tail.Count+1, tail.Hash
	data, err := forged.Encode()
	if err != nil {
		t.Fatal(err)
	}
	from := opLog.Subject(carrier, events.ApprovalGranted)
	if _, err := e.operator.js.Publish(ctx, from, data); err != nil {
		t.Fatalf("operator publish on %s: %v", from, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
	defer cancel()
	to := opLog.Subject(e.run, events.RunFinished)
	_, err = e.operator.js.CreateOrUpdatePushConsumer(cctx, opLog.StreamName(opLog.Shard(carrier)), jetstream.ConsumerConfig{
		Name: "relay", FilterSubject: from, DeliverSubject: to,
		AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverLastPolicy,
	})
	if err != nil {
		return // refused outright
	}
	time.Sleep(time.Second)
	got, err := e.log.Tail(ctx, e.run)
	if err != nil {
		t.Fatal(err)
	}
	if got != tail {
		t.Errorf("run %s moved from %+v to %+v after the operator pointed a push consumer from %s at %s: "+
			"the operator can write any run subject; it must not be allowed to create push consumers", e.run, tail, got, from, to)
	}
}
