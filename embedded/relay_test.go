package embedded_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPermissions_ARelayedReplyIsNeverAnEvent: NATS checks a publisher's
// subject against its permissions, not the reply subject it names, and a
// JetStream API reply goes to that reply subject, where the runs stream
// stores it. So the operator user, which may not publish on any run
// subject, can still have the server store there: a stream's info, or
// (with a direct get of a message it stored on arb.decide.*) the exact
// bytes of a valid, chained event of its choosing, with the headers it
// gave that message or with none. Each relay is made for real (the runs
// stream's count grows by one: the store happened) and none is believed:
// the worker's read refuses the run as broken, and never folds the
// relayed event (a cancellation nobody signed).
func TestPermissions_ARelayedReplyIsNeverAnEvent(t *testing.T) {
	for _, shards := range shardCases {
		for _, relay := range []string{"stream info", "direct get with its headers", "direct get with no headers"} {
			t.Run(fmt.Sprintf("%s/%s", shardName(shards), relay), func(t *testing.T) {
				e := newAuthEnv(t, events.Config{Shards: shards})
				ctx := t.Context()
				_, tail := e.pendingApproval(t)
				runStream := e.log.StreamName(e.log.Shard(e.run))
				target := e.log.Subject(e.run, events.RunCancelled)

				var req *nats.Msg
				switch relay {
				case "stream info":
					req = &nats.Msg{Subject: "$JS.API.STREAM.INFO." + runStream, Reply: target}
				default:
					ev := newEvent(t, e.run, events.RunCancelled, events.EndBody{Reason: events.ReasonApprovalDenied, Detail: "denied by nobody"})
					ev.V, ev.Seq, ev.Prev = events.FormatVersion, tail.Count+1, tail.Hash
					data, err := ev.Encode()
					if err != nil {
						t.Fatal(err)
					}
					// The carrier: a "decision" the operator may publish,
					// under ev's id as an append of ev would store it.
					ack, err := e.operator.js.PublishMsg(ctx, &nats.Msg{Subject: decisions.Subject(e.log, "carrier"), Data: data, Header: nats.Header{jetstream.MsgIDHeader: {ev.ID}}})
					if err != nil {
						t.Fatal(err)
					}
					body := fmt.Sprintf(`{"seq":%d}`, ack.Sequence)
					if relay == "direct get with no headers" {
						body = fmt.Sprintf(`{"seq":%d,"no_hdr":true}`, ack.Sequence)
					}
					req = &nats.Msg{Subject: "$JS.API.DIRECT.GET." + decisions.Stream(e.log), Reply: target, Data: []byte(body)}
				}
				before := e.streamMsgs(t, runStream)
				if err := e.operator.nc.PublishMsg(req); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(10 * time.Second)
				for e.streamMsgs(t, runStream) == before {
					if time.Now().After(deadline) {
						t.Fatalf("the %s relay stored nothing on %s in 10s: the test no longer makes the store it guards against", relay, target)
					}
					time.Sleep(10 * time.Millisecond)
				}
				e.operator.noViolations(t, relay)

				r, err := e.d.Load(ctx, e.run)
				if err == nil {
					t.Fatalf("the worker read the run after a %s relay onto %s: %s (%s), want it refused as broken", relay, target, r.View().Run.Status, r.View().Run.Reason)
				}
				if !errors.Is(err, events.ErrBrokenChain) && !errors.Is(err, events.ErrMalformed) {
					t.Errorf("load after a %s relay: %v, want a broken chain", relay, err)
				}
				if _, err := e.log.Tail(ctx, e.run); err == nil && relay != "stream info" {
					t.Errorf("Tail believed the relayed event")
				}
			})
		}
	}
}

// streamMsgs is how many messages stream holds, as the admin reads it.
func (e *authEnv) streamMsgs(t *testing.T, stream string) uint64 {
	t.Helper()
	s, err := e.admin.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
