package embedded_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPermissions_WorkerCannotManage: the worker user can create, update,
// purge or delete no stream, consumer or bucket, and delete no message.
func TestPermissions_WorkerCannotManage(t *testing.T) {
	for _, shards := range shardCases {
		t.Run(shardName(shards), func(t *testing.T) {
			e := newAuthEnv(t, events.Config{Shards: shards})
			cannotManage(t, e, e.worker)
			before := e.state(t)
			wcfg := e.q.Config()
			api := "$JS.API.CONSUMER."
			streams := []string{wcfg.WorkStream, decisions.Stream(e.log), "KV_" + wcfg.SnapshotBucket, "KV_" + wcfg.AgentsBucket}
			for k := 0; k < shards; k++ {
				streams = append(streams, e.log.StreamName(k))
			}
			for _, st := range streams {
				for _, subj := range []string{api + "CREATE." + st, api + "CREATE." + st + ".x", api + "DURABLE.CREATE." + st + ".x", api + "DELETE." + st + ".x"} {
					e.worker.refusedPublish(t, subj, nil, []byte(`{}`))
				}
			}
			for _, op := range []string{"CREATE.", "DURABLE.CREATE.", "DELETE.", "PAUSE.", "RESET.", "UNPIN.", "LEADER.STEPDOWN."} {
				e.worker.refusedPublish(t, api+op+wcfg.WorkStream+"."+wcfg.Consumer, nil, []byte(`{}`))
			}
			e.worker.refused(t, "re-filter the work consumer", func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.CreateOrUpdateConsumer(ctx, wcfg.WorkStream, jetstream.ConsumerConfig{
					Durable: wcfg.Consumer, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: wcfg.WorkPrefix + ".nothing-ever",
				})
				return err
			})
			e.worker.refused(t, "delete the work consumer", func(ctx context.Context, js jetstream.JetStream) error {
				return js.DeleteConsumer(ctx, wcfg.WorkStream, wcfg.Consumer)
			})
			e.worker.refused(t, "set the fleet up", func(ctx context.Context, js jetstream.JetStream) error {
				_, _, err := fleet.Setup(ctx, js, fleet.Config{})
				return err
			})
			e.worker.refused(t, "open (create) the log", func(ctx context.Context, js jetstream.JetStream) error {
				_, err := events.Open(ctx, js, e.log.Config())
				return err
			})
			e.unchanged(t, before)
		})
	}
}

// TestPermissions_WorkerCannotPublishDecision: even a decision properly
// signed by the configured operator's key cannot be published on the
// decisions stream by the worker user: a worker records what an operator
// published, it never publishes one.
func TestPermissions_WorkerCannotPublishDecision(t *testing.T) {
	for _, shards := range shardCases {
		t.Run(shardName(shards), func(t *testing.T) {
			e := newAuthEnv(t, events.Config{Shards: shards})
			a, _ := e.pendingApproval(t)
			before := e.state(t)
			for _, decision := range []string{events.DecisionGrant, events.DecisionDeny} {
				d, err := approvals.Sign(e.opKey, e.run, a.ID, a.Hash, decision, "", time.Now())
				if err != nil {
					t.Fatal(err)
				}
				data, err := json.Marshal(d)
				if err != nil {
					t.Fatal(err)
				}
				for _, subj := range []string{decisions.Subject(e.log, e.run), decisions.Subject(e.log, "other"), decisions.Subject(e.log, e.run) + ".x"} {
					e.worker.refusedPublish(t, subj, nil, data)
				}
				e.worker.refused(t, "publish a decision", func(ctx context.Context, _ jetstream.JetStream) error {
					_, err := decisions.Publish(ctx, e.log, e.run, events.NewID(), data)
					return err
				})
			}
			e.unchanged(t, before)
		})
	}
}

// TestPermissions_AdminWritesNoRunOrDecision: the admin user sets up, and
// cannot act as a worker or an operator.
func TestPermissions_AdminWritesNoRunOrDecision(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	before := e.state(t)
	for _, subj := range []string{e.log.Subject(e.run, events.RunFinished), decisions.Subject(e.log, e.run), "arb.work." + e.run, "$KV.ARB_VIEWS." + e.run, "$JS.ACK.ARB_WORK.arb-workers.1.1.1.0.0"} {
		e.admin.refusedPublish(t, subj, nil, []byte(`{}`))
	}
	e.unchanged(t, before)
}

// TestPermissions_WorkerRunsTheFleet: with only the worker user's
// permissions, fleet workers take a run from the queue, drive it to an
// approval (with an expiry timer and a snapshot), see the operator's signed
// grant on the decisions stream, record it on the run and finish it,
// executing the tool once, without one refusal from the server.
func TestPermissions_WorkerRunsTheFleet(t *testing.T) {
	for _, shards := range shardCases {
		t.Run(shardName(shards), func(t *testing.T) {
			e := newAuthEnv(t, events.Config{Shards: shards})
			ctx := t.Context()
			pub, _ := e.opKey.PublicKey()
			send := testkit.NewLedger("send", events.RemoteMutation, sendSchema)
			d, err := driver.New(driver.Config{
				Log: e.log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"),
				Tools:       []driver.Tool{send, testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()},
				Operators:   approvals.Operators{pub: "alice"},
				ApprovalTTL: time.Hour,
			})
			if err != nil {
				t.Fatal(err)
			}
			e.runWorker(t, d)
			run := "run-fleet-" + events.NewID()
			if err := e.q.Start(ctx, d, run, "s", nil); err != nil {
				t.Fatalf("start as worker: %v", err)
			}
			v := waitView(t, d, run, func(v projector.View) bool { return v.Run.Status == projector.Waiting })
			a := v.PendingApproval()
			// While it waits, the worker has written the expiry timer and
			// a snapshot (a timer taken after the grant is acknowledged
			// and gone, so look now).
			ws, err := e.admin.js.Stream(ctx, "ARB_WORK")
			if err != nil {
				t.Fatal(err)
			}
			kv, err := e.admin.js.KeyValue(ctx, "ARB_VIEWS")
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, "the expiry timer of "+run, func() error {
				_, err := ws.GetLastMsgForSubject(ctx, "arb.work."+run+".expiry")
				return err
			})
			eventually(t, "the snapshot of "+run, func() error {
				_, err := kv.Get(ctx, run)
				return err
			})

			// The operator publishes its decision and nudges; a worker
			// reads it from the decisions stream, verifies and records it.
			opLog, err := events.Attach(ctx, e.operator.js, e.log.Config())
			if err != nil {
				t.Fatal(err)
			}
			sd, err := approvals.Sign(e.opKey, run, a.ID, a.Hash, events.DecisionGrant, "ok", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := approvals.Publish(ctx, opLog, run, sd); err != nil {
				t.Fatalf("publish the grant as operator: %v", err)
			}
			if err := fleet.NewQueue(e.operator.js, fleet.Config{}).Nudge(ctx, run, "decided"); err != nil {
				t.Fatal(err)
			}
			waitView(t, d, run, func(v projector.View) bool { return v.Run.Status == projector.Completed })
			if n := send.Count(); n != 1 {
				t.Errorf("send executed %d times, want 1", n)
			}
			e.worker.noViolations(t, "a fleet run with an approval")
		})
	}
}

// runWorker runs a fleet worker as the worker user, with d and e's agent,
// until the test ends; it must then stop cleanly.
func (e *authEnv) runWorker(t *testing.T, d *driver.Driver) {
	t.Helper()
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: e.q, Snapshots: e.snaps, Agents: map[string]driver.Agent{"": e.agent()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
}

// TestPermissions_OperatorNudgeClaimingAStatusIsANudge: the operator user
// may nudge any run, and its nudge may carry any headers. The only nudge
// of a run it publishes empty with "Status: 409, Description: Consumer
// Deleted": the JetStream client's fetch took that for the server's
// status and dropped it, so the run waited out the consumer's ack wait
// (30 s) and, at every redelivery, the same again. The worker takes it
// for the nudge it is and drives the run onto its approval.
func TestPermissions_OperatorNudgeClaimingAStatusIsANudge(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	run := "run-claims-" + events.NewID()
	if _, err := e.d.Create(t.Context(), run, "s", nil); err != nil {
		t.Fatalf("create as worker: %v", err)
	}
	e.runWorker(t, e.d)
	claim := &nats.Msg{Subject: e.q.Config().WorkPrefix + "." + run, Header: nats.Header{"Status": {"409"}, "Description": {"Consumer Deleted"}}}
	if _, err := e.operator.js.PublishMsg(t.Context(), claim); err != nil {
		t.Fatalf("nudge as operator: %v", err)
	}
	waitView(t, e.d, run, func(v projector.View) bool { return v.Run.Status == projector.Waiting })
	e.operator.noViolations(t, "a nudge claiming a status")
}

// eventually retries check until it succeeds (5s at most).
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 5s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitView loads run until ok holds for its view (10s at most).
func waitView(t *testing.T, d *driver.Driver, run string, ok func(projector.View) bool) projector.View {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := d.Load(t.Context(), run)
		if err == nil && ok(r.View()) {
			return r.View()
		}
		if time.Now().After(deadline) {
			st := "unreadable"
			if err == nil {
				st = string(r.View().Run.Status)
			}
			t.Fatalf("run %s still %s after 10s (%v)", run, st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPermissions_WorkerCannotSmuggleGrantOnRunSubject: a grant the worker
// user stores under step.policy must not be read as one, nor when it
// carries a Nats-Subject header naming approval.granted (the server's own
// header comes after it, and is the one read).
func TestPermissions_WorkerCannotSmuggleGrantOnRunSubject(t *testing.T) {
	for _, claim := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "claiming its subject"}[claim], func(t *testing.T) {
			smuggleGrant(t, claim)
		})
	}
}

func smuggleGrant(t *testing.T, claim bool) {
	e := newAuthEnv(t, events.Config{})
	a, tail := e.pendingApproval(t)
	d, err := approvals.Sign(e.opKey, e.run, a.ID, a.Hash, events.DecisionGrant, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ev := newEvent(t, e.run, events.ApprovalGranted, d)
	ev.V, ev.Seq, ev.Prev = events.FormatVersion, tail.Count+1, tail.Hash
	data, err := ev.Encode()
	if err != nil {
		t.Fatal(err)
	}
	h := fenced(e.log, ev, tail)
	if claim {
		h.Set(jetstream.SubjectHeader, e.log.Subject(e.run, events.ApprovalGranted))
	}
	if _, err := e.worker.js.PublishMsg(t.Context(), &nats.Msg{Subject: e.log.Subject(e.run, events.StepPolicy), Data: data, Header: h}); err != nil {
		t.Fatalf("worker publish on step.policy: %v", err)
	}
	if _, _, err := e.log.Read(t.Context(), e.run); !errors.Is(err, events.ErrBrokenChain) && !errors.Is(err, events.ErrMalformed) {
		t.Errorf("read of a run holding a smuggled grant = %v, want %v or %v", err, events.ErrBrokenChain, events.ErrMalformed)
	}
}
