package embedded_test

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/arbiter-run/arbiter/rules/kvwindows"
	"github.com/nats-io/nats.go"
)

// relays are the ways the operator user has the server store a message on
// a subject it may not publish on: a JetStream API reply sent to that
// subject as the request's reply. A stream's info and the API's message
// get of a decision are JSON bodies; a direct get of a run's event (the
// runs streams are the only ones it may direct-get, and only workers write
// them) is that event's exact bytes, with its headers and the server's, or
// with none at all. What it cannot do any more is serve a header block of
// its own choosing (see TestPermissions_OperatorServesNoHeaderBlockOfItsOwn).
var relays = []string{"stream info", "message get of a decision", "direct get with its headers", "direct get with no headers"}

// relay has the operator store a reply on target (a subject of stream) by
// the relay named, and waits until the store happened: the stream's last
// sequence moves (its count may not: a bucket keeps one message a key). A
// relay that stored nothing would make the test guard nothing, and fails
// it. The direct gets copy the run's first event; the message get, a
// decision the operator publishes for it.
func (e *authEnv) relay(t *testing.T, relay, stream, target string) {
	t.Helper()
	ctx := t.Context()
	var req *nats.Msg
	switch relay {
	case "stream info":
		req = &nats.Msg{Subject: "$JS.API.STREAM.INFO." + decisions.Stream(e.log), Reply: target}
	case "message get of a decision":
		ack, err := e.operator.js.Publish(ctx, decisions.Subject(e.log, "carrier-"+events.NewID()), []byte(`{"decision":"grant"}`))
		if err != nil {
			t.Fatal(err)
		}
		req = &nats.Msg{Subject: "$JS.API.STREAM.MSG.GET." + decisions.Stream(e.log), Reply: target, Data: fmt.Appendf(nil, `{"seq":%d}`, ack.Sequence)}
	default:
		recs, _, err := e.log.Read(ctx, e.run)
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"seq":%d}`, recs[0].StreamSeq)
		if relay == "direct get with no headers" {
			body = fmt.Sprintf(`{"seq":%d,"no_hdr":true}`, recs[0].StreamSeq)
		}
		req = &nats.Msg{Subject: "$JS.API.DIRECT.GET." + recs[0].Stream, Reply: target, Data: []byte(body)}
	}
	before := e.streamLastSeq(t, stream)
	if err := e.operator.nc.PublishMsg(req); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.streamLastSeq(t, stream) == before {
		if time.Now().After(deadline) {
			t.Fatalf("the %s relay stored nothing on %s in 10s: the test no longer makes the store it guards against", relay, target)
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.operator.noViolations(t, relay)
}

// TestPermissions_ARelayedReplyIsNeverARateCount: the fleet-wide rate
// windows of rules files count calls in a bucket only workers may write.
// The operator user can still have the server store a reply of its own on
// a window's key, after the window's limit was reached; the count it
// replaced is gone. The window is refused, with its key named: the rule
// fails closed, and no call past the limit is counted as allowed.
func TestPermissions_ARelayedReplyIsNeverARateCount(t *testing.T) {
	for _, relay := range relays {
		t.Run(relay, func(t *testing.T) {
			e := newAuthEnv(t, events.Config{})
			ctx := t.Context()
			if _, err := kvwindows.Open(ctx, e.admin.js, kvwindows.Config{}); err != nil {
				t.Fatal(err)
			}
			w, err := kvwindows.Open(ctx, e.worker.js, kvwindows.Config{})
			if err != nil {
				t.Fatal(err)
			}
			const key, limit = "deploys.2026120308", 2
			for i := range limit {
				if n, ok, err := w.Take(ctx, key, limit); err != nil || !ok || n != int64(i) {
					t.Fatalf("take %d: counted %d, ok %v, err %v: want %d, true, nil", i+1, n, ok, err, i)
				}
			}
			if _, ok, err := w.Take(ctx, key, limit); err != nil || ok {
				t.Fatalf("a take over the limit: ok %v, err %v, want refused", ok, err)
			}
			e.relay(t, relay, "KV_"+layout.RatesBucket, "$KV."+layout.RatesBucket+"."+key)
			n, ok, err := w.Take(ctx, key, limit)
			if ok {
				t.Fatalf("after a %s relay onto the window, a take over its limit of %d was allowed (counted %d)", relay, limit, n)
			}
			if err == nil {
				t.Fatalf("after a %s relay onto the window, the take was refused (counted %d) with no error: the window's count is no longer known and should say so", relay, n)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestPermissions_ARelayedReplyIsNeverASnapshot: a snapshot only speeds up
// a worker's load, but what it holds is what the agent is shown when it
// decides a new step. The operator user may not write the snapshot bucket,
// and what it has the server store on a run's key is not loaded: the
// worker folds the run from its events, and the view is the events'.
func TestPermissions_ARelayedReplyIsNeverASnapshot(t *testing.T) {
	for _, relay := range relays {
		t.Run(relay, func(t *testing.T) {
			e := newAuthEnv(t, events.Config{})
			ctx := t.Context()
			r, err := e.d.Load(ctx, e.run)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.snaps.Save(ctx, r); err != nil {
				t.Fatalf("save snapshot as worker: %v", err)
			}
			if _, from, err := e.snaps.Load(ctx, e.d, e.run); err != nil || !from {
				t.Fatalf("the worker's own snapshot: from snapshot %v, err %v: want it loaded", from, err)
			}
			e.relay(t, relay, "KV_"+layout.ViewsBucket, "$KV."+layout.ViewsBucket+"."+e.run)
			got, from, err := e.snaps.Load(ctx, e.d, e.run)
			if err != nil {
				t.Fatalf("load after a %s relay onto the snapshot: %v, want the run folded from its events", relay, err)
			}
			if from {
				t.Fatalf("after a %s relay onto the snapshot, the worker loaded it: want the run folded from its events", relay)
			}
			if !reflect.DeepEqual(got.View(), r.View()) {
				t.Fatalf("after a %s relay onto the snapshot, the view is not the events'", relay)
			}
		})
	}
}

// TestPermissions_ARelayedReplyIsNeverAnOffer: the agents registry says
// which agents live workers offer, and the actor a new run of an agent is
// created with when its starter names none. The operator user cannot
// have the server store an offer there: what it relays onto a key of agent
// "billing" (a run's event as JSON, with no header, reads as an offer
// with no defaults to a reader that does not look for the writer's mark)
// is no offer; the one live worker offers only its default agent, whose
// runs get no actor.
func TestPermissions_ARelayedReplyIsNeverAnOffer(t *testing.T) {
	for _, relay := range relays {
		t.Run(relay, func(t *testing.T) {
			e := newAuthEnv(t, events.Config{})
			ctx := t.Context()
			e.runWorker(t, e.d)
			deadline := time.Now().Add(10 * time.Second)
			for {
				ok, err := e.q.Offered(ctx, "billing")
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					break // through the worker's default agent
				}
				if time.Now().After(deadline) {
					t.Fatal("the worker's default agent was not offered in 10s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			target := "$KV." + layout.AgentsBucket + "." + hex.EncodeToString([]byte("billing")) + ".forged"
			e.relay(t, relay, "KV_"+layout.AgentsBucket, target)
			body := events.RunCreatedBody{Agent: "billing"}
			if err := e.q.ApplyDefaults(ctx, &body); err != nil {
				t.Fatalf("defaults after a %s relay onto the registry: %v", relay, err)
			}
			if body.Actor != nil {
				t.Fatalf("after a %s relay onto the registry, a new run of billing is created as %+v", relay, body.Actor)
			}
			agents, err := e.q.Agents(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range agents {
				if a == "billing" {
					t.Fatalf("after a %s relay onto the registry, the live agents are %v: billing is offered by nobody", relay, agents)
				}
			}
		})
	}
}

// streamLastSeq is the sequence of the last message stream stored, as the
// admin reads it.
func (e *authEnv) streamLastSeq(t *testing.T, stream string) uint64 {
	t.Helper()
	s, err := e.admin.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}
