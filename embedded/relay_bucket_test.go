package embedded_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
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
// subject as the request's reply. A stream's info is a JSON body; a direct
// get of a message it published on arb.decide.* (which it may) is that
// message's exact bytes, with its headers (and the server's, naming the
// decisions stream) or with none at all.
var relays = []string{"stream info", "direct get with its headers", "direct get with no headers"}

// relay has the operator store data on target (a subject of stream) by
// the relay named, and waits until the store happened: the stream's last
// sequence moves (its count may not: a bucket keeps one message a key). A relay that stored nothing would make the test guard
// nothing, and fails it.
func (e *authEnv) relay(t *testing.T, relay, stream, target string, data []byte, hdr nats.Header) {
	t.Helper()
	ctx := t.Context()
	var req *nats.Msg
	switch relay {
	case "stream info":
		req = &nats.Msg{Subject: "$JS.API.STREAM.INFO." + decisions.Stream(e.log), Reply: target}
	default:
		ack, err := e.operator.js.PublishMsg(ctx, &nats.Msg{Subject: decisions.Subject(e.log, "carrier-"+events.NewID()), Data: data, Header: hdr})
		if err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf(`{"seq":%d}`, ack.Sequence)
		if relay == "direct get with no headers" {
			body = fmt.Sprintf(`{"seq":%d,"no_hdr":true}`, ack.Sequence)
		}
		req = &nats.Msg{Subject: "$JS.API.DIRECT.GET." + decisions.Stream(e.log), Reply: target, Data: []byte(body)}
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
// The operator user can still have the server store a message on a
// window's key, with a JetStream API reply: here "0", the count of a
// window nobody used, after the window's limit was reached. A window that
// believed it would let the policy allow calls beyond the limit. It is
// refused, with the window's key named: the rule fails closed, so no
// further call is counted as allowed.
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
			e.relay(t, relay, "KV_"+layout.RatesBucket, "$KV."+layout.RatesBucket+"."+key, []byte("0"), nil)
			n, ok, err := w.Take(ctx, key, limit)
			if ok {
				t.Fatalf("after a %s relay of %q onto the window, a take over its limit of %d was allowed (counted %d)", relay, "0", limit, n)
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
// and cannot have the server store one there either: a relayed copy of
// the run's own snapshot with an observation the run never recorded (the
// model would read it as the tool's answer) is not loaded; the worker
// folds the run from its events.
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
			// The crafted snapshot: the run's view, a word changed where
			// the agent reads it.
			v := r.View()
			v.Run.Actor = &events.Actor{ID: "root", Roles: []string{"admin"}}
			crafted, err := json.Marshal(map[string]any{"tail": r.Tail(), "view": v})
			if err != nil {
				t.Fatal(err)
			}
			e.relay(t, relay, "KV_"+layout.ViewsBucket, "$KV."+layout.ViewsBucket+"."+e.run, crafted, nil)
			got, from, err := e.snaps.Load(ctx, e.d, e.run)
			if err != nil {
				t.Fatalf("load after a %s relay onto the snapshot: %v, want the run folded from its events", relay, err)
			}
			if from {
				t.Fatalf("after a %s relay onto the snapshot, the worker loaded it (actor %+v): want the run folded from its events", relay, got.View().Run.Actor)
			}
			if a := got.View().Run.Actor; a != nil && a.ID == "root" {
				t.Fatalf("the loaded view holds the crafted actor %+v", a)
			}
		})
	}
}

// TestPermissions_ARelayedReplyIsNeverAnOffer: the agents registry says
// which agents live workers offer, and the actor a new run of an agent is
// created with when its starter names none. The operator user cannot
// have the server store an offer there: a relayed offer of agent "billing"
// that gives its runs the actor "root" with the role admin is neither an
// offer nor a default; the one live worker offers only its default agent,
// whose runs get no actor.
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
			offer, err := json.Marshal(map[string]any{"agent": "billing", "actor": map[string]any{"id": "root", "roles": []string{"admin"}}})
			if err != nil {
				t.Fatal(err)
			}
			target := "$KV." + layout.AgentsBucket + "." + hex.EncodeToString([]byte("billing")) + ".forged"
			e.relay(t, relay, "KV_"+layout.AgentsBucket, target, offer, nil)
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
