package embedded_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/nats-io/nats.go/jetstream"
)

// runSubjects are the subjects an event of kind k of run could be stored
// on: in the log's shard layout, and in the other one (with one shard
// arb.run.<run>.<kind>, with more arb.run.<k>.<run>.<kind>), which a
// permission written for the wrong layout would leave open.
func runSubjects(l *events.Log, run string, k events.Kind) []string {
	cfg := l.Config()
	out := []string{l.Subject(run, k)}
	if cfg.Shards == 1 {
		out = append(out, cfg.Prefix+".0."+run+"."+string(k), cfg.Prefix+".7."+run+"."+string(k))
	} else {
		out = append(out, cfg.Prefix+"."+run+"."+string(k))
		for s := 0; s < cfg.Shards; s++ {
			out = append(out, cfg.Prefix+"."+strconv.Itoa(s)+"."+run+"."+string(k))
		}
	}
	return out
}

// TestPermissions_OperatorCannotPublishRunSubjects: the operator user may
// not store anything on a run's subjects: no kind, in either shard layout,
// fenced like an append or not, for an existing run or a new one. Decisions
// go to arb.decide.<run>; the worker records them.
func TestPermissions_OperatorCannotPublishRunSubjects(t *testing.T) {
	for _, shards := range shardCases {
		t.Run(shardName(shards), func(t *testing.T) {
			e := newAuthEnv(t, events.Config{Shards: shards})
			a, tail := e.pendingApproval(t)
			before := e.state(t)
			for _, run := range []string{e.run, "run-by-operator"} {
				for _, k := range events.Kinds {
					var body any = events.PolicyBody{Step: 1, Outcome: events.Allow, Reason: "operator says so", Args: []byte(`{"to":"all"}`)}
					if k == events.ApprovalGranted {
						d, err := approvals.Sign(e.opKey, e.run, a.ID, a.Hash, events.DecisionGrant, "", time.Now())
						if err != nil {
							t.Fatal(err)
						}
						body = d
					}
					ev := newEvent(t, run, k, body)
					ev.V, ev.Seq, ev.Prev = events.FormatVersion, tail.Count+1, tail.Hash
					data, err := json.Marshal(ev)
					if err != nil {
						t.Fatal(err)
					}
					for _, subj := range runSubjects(e.log, run, k) {
						e.operator.refusedPublish(t, subj, nil, data)
						e.operator.refusedPublish(t, subj, fenced(e.log, ev, tail), data)
					}
				}
			}
			// Through the log's own append too.
			opLog, err := events.Attach(t.Context(), e.operator.js, e.log.Config())
			if err != nil {
				t.Fatal(err)
			}
			e.operator.refused(t, "append run.finished", func(ctx context.Context, _ jetstream.JetStream) error {
				_, err := opLog.Append(ctx, tail, newEvent(t, e.run, events.RunFinished, events.EndBody{Reason: events.ReasonCompleted}))
				return err
			})
			e.unchanged(t, before)
		})
	}
}

// TestPermissions_OperatorHasNoConsumerAPI: the operator user cannot
// create, update, delete, drain, pause or reset any consumer on any stream:
// not the fleet's work consumer, not another client's consumer on a runs
// stream, not one of its own (a push consumer could relay a message onto a
// run subject).
func TestPermissions_OperatorHasNoConsumerAPI(t *testing.T) {
	for _, shards := range shardCases {
		t.Run(shardName(shards), func(t *testing.T) {
			e := newAuthEnv(t, events.Config{Shards: shards})
			ctx := t.Context()
			if err := e.q.Nudge(ctx, e.run, "test"); err != nil {
				t.Fatal(err)
			}
			// Another client's consumer on a runs stream: a watcher of old.
			runs0 := e.log.StreamName(0)
			if _, err := e.admin.js.CreateOrUpdateConsumer(ctx, runs0, jetstream.ConsumerConfig{
				Durable: "someone", AckPolicy: jetstream.AckExplicitPolicy,
			}); err != nil {
				t.Fatal(err)
			}
			before := e.state(t)
			wcfg := e.q.Config()
			streams := []string{wcfg.WorkStream, decisions.Stream(e.log), "KV_" + wcfg.SnapshotBucket, "KV_" + wcfg.AgentsBucket}
			for k := 0; k < shards; k++ {
				streams = append(streams, e.log.StreamName(k))
			}
			named := map[string]string{wcfg.WorkStream: wcfg.Consumer, runs0: "someone"}
			for _, st := range streams {
				api := "$JS.API.CONSUMER."
				subjects := []string{
					api + "CREATE." + st, api + "CREATE." + st + ".x", api + "CREATE." + st + ".x." + e.log.RunFilter(e.run),
					api + "DURABLE.CREATE." + st + ".x", api + "LIST." + st, api + "NAMES." + st,
				}
				if c := named[st]; c != "" {
					for _, op := range []string{"CREATE.", "DURABLE.", "DURABLE.CREATE.", "DELETE.", "MSG.NEXT.", "PAUSE.", "RESET.", "UNPIN.", "INFO.", "LEADER.STEPDOWN."} {
						subjects = append(subjects, api+op+st+"."+c)
					}
					subjects = append(subjects, "$JS.ACK."+st+"."+c+".1.1.1.0.0", "$JS.FC."+st+".x")
				}
				for _, subj := range subjects {
					e.operator.refusedPublish(t, subj, nil, []byte(`{}`))
				}
			}
			e.operator.refused(t, "re-filter the work consumer", func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.CreateOrUpdateConsumer(ctx, wcfg.WorkStream, jetstream.ConsumerConfig{
					Durable: wcfg.Consumer, AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: wcfg.WorkPrefix + ".nothing-ever",
				})
				return err
			})
			e.operator.refused(t, "delete the work consumer", func(ctx context.Context, js jetstream.JetStream) error {
				return js.DeleteConsumer(ctx, wcfg.WorkStream, wcfg.Consumer)
			})
			e.operator.refused(t, "delete another client's consumer", func(ctx context.Context, js jetstream.JetStream) error {
				return js.DeleteConsumer(ctx, runs0, "someone")
			})
			e.operator.refused(t, "ordered consumer on a runs stream", func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.OrderedConsumer(ctx, runs0, jetstream.OrderedConsumerConfig{})
				return err
			})
			e.operator.refused(t, "push consumer delivering onto a run subject", func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.CreateOrUpdatePushConsumer(ctx, decisions.Stream(e.log), jetstream.ConsumerConfig{
					Name: "relay", DeliverSubject: e.log.Subject(e.run, events.RunFinished), AckPolicy: jetstream.AckNonePolicy,
				})
				return err
			})
			e.unchanged(t, before)
			// The nudge is still waiting for a worker.
			ws, err := e.admin.js.Stream(ctx, wcfg.WorkStream)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ws.GetLastMsgForSubject(ctx, wcfg.WorkPrefix+"."+e.run); err != nil {
				t.Errorf("the nudge for %s is gone from the work queue: %v", e.run, err)
			}
		})
	}
}

// streamAPI are the subjects that create, change or destroy stream st or
// what it stores.
func streamAPI(st string) []string {
	api := "$JS.API.STREAM."
	return []string{
		api + "CREATE." + st, api + "UPDATE." + st, api + "DELETE." + st, api + "PURGE." + st,
		api + "MSG.DELETE." + st, api + "SNAPSHOT." + st, api + "RESTORE." + st,
		api + "LEADER.STEPDOWN." + st, api + "PEER.REMOVE." + st,
	}
}

// TestPermissions_OperatorCannotManageStreams: no stream, bucket or
// snapshot can be created, changed, purged or deleted by the operator user.
func TestPermissions_OperatorCannotManageStreams(t *testing.T) {
	e := newAuthEnv(t, events.Config{Shards: 3})
	cannotManage(t, e, e.operator)
	e.operator.refusedPublish(t, "$KV.ARB_VIEWS."+e.run, nil, []byte(`{}`))
	e.operator.refusedPublish(t, "$KV.ARB_AGENTS.6f7073.w1", nil, []byte(`ops`))
}

// cannotManage holds c to changing nothing about any stream or bucket.
func cannotManage(t *testing.T, e *authEnv, c *client) {
	t.Helper()
	before := e.state(t)
	streams := []string{"ARB_WORK", decisions.Stream(e.log), "KV_ARB_VIEWS", "KV_ARB_AGENTS", "NEW_STREAM"}
	for k := 0; k < e.log.Config().Shards; k++ {
		streams = append(streams, e.log.StreamName(k))
	}
	for _, st := range streams {
		for _, subj := range streamAPI(st) {
			c.refusedPublish(t, subj, nil, []byte(`{}`))
		}
	}
	runs0 := e.log.StreamName(0)
	calls := []struct {
		name string
		do   func(ctx context.Context, js jetstream.JetStream) error
	}{
		{"create a stream", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "OPS", Subjects: []string{"ops.>"}})
			return err
		}},
		{"delete a runs stream", func(ctx context.Context, js jetstream.JetStream) error { return js.DeleteStream(ctx, runs0) }},
		{"update a runs stream", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: runs0, Subjects: []string{"arb.run.>"}, MaxMsgs: 1})
			return err
		}},
		{"purge the decisions stream", func(ctx context.Context, js jetstream.JetStream) error {
			s, err := js.Stream(ctx, decisions.Stream(e.log))
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		}},
		{"delete a run event", func(ctx context.Context, js jetstream.JetStream) error {
			s, err := js.Stream(ctx, runs0)
			if err != nil {
				return err
			}
			return s.DeleteMsg(ctx, 1)
		}},
		{"delete the work stream", func(ctx context.Context, js jetstream.JetStream) error { return js.DeleteStream(ctx, "ARB_WORK") }},
		{"delete the snapshot bucket", func(ctx context.Context, js jetstream.JetStream) error { return js.DeleteKeyValue(ctx, "ARB_VIEWS") }},
		{"delete the agents registry", func(ctx context.Context, js jetstream.JetStream) error { return js.DeleteKeyValue(ctx, "ARB_AGENTS") }},
		{"create a bucket", func(ctx context.Context, js jetstream.JetStream) error {
			_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "OTHER"})
			return err
		}},
	}
	for _, call := range calls {
		c.refused(t, call.name, call.do)
	}
	e.unchanged(t, before)
}

// TestPermissions_OperatorCanDecideNudgeAndRead: what `arbiter` does as the
// operator user draws no violation: reading runs (Read, Tail, Scan, Follow,
// listing by kind), watching approvals durably, publishing a signed decision
// on arb.decide.<run> and reading it back, nudging.
func TestPermissions_OperatorCanDecideNudgeAndRead(t *testing.T) {
	for _, shards := range shardCases {
		t.Run(shardName(shards), func(t *testing.T) {
			e := newAuthEnv(t, events.Config{Shards: shards})
			ctx := t.Context()
			opLog, err := events.Attach(ctx, e.operator.js, e.log.Config())
			if err != nil {
				t.Fatalf("attach as operator: %v", err)
			}
			if _, err := e.operator.js.AccountInfo(ctx); err != nil {
				t.Errorf("account info as operator: %v", err)
			}
			recs, tail, err := opLog.Read(ctx, e.run)
			if err != nil {
				t.Fatalf("read as operator: %v", err)
			}
			if got, _ := opLog.Tail(ctx, e.run); got != tail || len(recs) != int(tail.Count) {
				t.Errorf("operator tail %+v with %d records, read %+v", got, len(recs), tail)
			}
			k := opLog.Shard(e.run)
			scanned := 0
			if err := opLog.Scan(ctx, k, 1, func(events.RawRecord) error { scanned++; return nil }); err != nil || scanned != len(recs) {
				t.Errorf("scan as operator: %d records, %v; want %d", scanned, err, len(recs))
			}
			s, err := e.operator.js.Stream(ctx, opLog.StreamName(k))
			if err != nil {
				t.Fatal(err)
			}
			if info, err := s.Info(ctx, jetstream.WithSubjectFilter(opLog.KindFilter(k, events.ApprovalRequested))); err != nil || len(info.State.Subjects) != 1 {
				t.Errorf("list runs by kind as operator: %v", err)
			}

			fctx, stopFollow := context.WithCancel(ctx)
			followed := make(chan events.RawRecord, 16)
			go func() {
				_ = opLog.Follow(fctx, k, 1, func(r events.RawRecord) error { followed <- r; return nil })
			}()
			defer stopFollow()
			wctx, stopWatch := context.WithCancel(ctx)
			seen := make(chan events.Kind, 16)
			watched := make(chan error, 1)
			state := filepath.Join(t.TempDir(), "watch.json")
			go func() {
				watched <- approvals.Watch(wctx, opLog, state, func(n approvals.Notice) error { seen <- n.Event.Kind; return nil })
			}()
			select {
			case k := <-seen:
				if k != events.ApprovalRequested {
					t.Errorf("operator's watch saw %s first, want %s", k, events.ApprovalRequested)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("operator's watch delivered nothing in 5s")
			}
			for range recs {
				select {
				case <-followed:
				case <-time.After(5 * time.Second):
					t.Fatal("operator's follow delivered too little in 5s")
				}
			}

			a, _ := e.pendingApproval(t)
			d, err := approvals.Sign(e.opKey, e.run, a.ID, a.Hash, events.DecisionGrant, "ok", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			data, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			seq, err := decisions.Publish(ctx, opLog, e.run, events.NewID(), data)
			if err != nil {
				t.Fatalf("publish decision as operator: %v", err)
			}
			got, err := decisions.Read(ctx, opLog, e.run, 0, 10)
			if err != nil || len(got) != 1 || got[0].Sequence != seq {
				t.Errorf("decisions read back as operator: %d, %v; want the one at %d", len(got), err, seq)
			}
			if err := fleet.NewQueue(e.operator.js, fleet.Config{}).Nudge(ctx, e.run, "decided"); err != nil {
				t.Fatalf("nudge as operator: %v", err)
			}
			stopWatch()
			if err := <-watched; err != nil {
				t.Errorf("watch as operator: %v", err)
			}
			stopFollow()
			e.operator.noViolations(t, "reads, watch, follow, decision and nudge")
			// The run itself is untouched: only a worker records the decision.
			if now, _ := e.log.Tail(ctx, e.run); now != tail {
				t.Errorf("run moved from %+v to %+v on the operator's decision", tail, now)
			}
		})
	}
}

// TestPermissions_OperatorCannotWriteToAnotherClientsInbox: replies to a
// worker's requests come to the worker's inbox; a user that could publish
// there could answer for the server.
func TestPermissions_OperatorCannotWriteToAnotherClientsInbox(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	for _, inbox := range []string{e.worker.nc.NewRespInbox(), embedded.AdminInbox + ".x", "_INBOX.x"} {
		e.operator.refusedPublish(t, inbox, nil, []byte(`{"stream":"ARB_RUNS_0","seq":999}`))
	}
}
