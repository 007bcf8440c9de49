package embedded_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/arbiter-run/arbiter/events"
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
// stream's last sequence moves: the store happened) and none is believed:
// the worker's read refuses the run as broken, and never folds the
// relayed event (a cancellation nobody signed).
func TestPermissions_ARelayedReplyIsNeverAnEvent(t *testing.T) {
	for _, shards := range shardCases {
		for _, relay := range relays {
			t.Run(fmt.Sprintf("%s/%s", shardName(shards), relay), func(t *testing.T) {
				e := newAuthEnv(t, events.Config{Shards: shards})
				ctx := t.Context()
				_, tail := e.pendingApproval(t)
				runStream := e.log.StreamName(e.log.Shard(e.run))
				target := e.log.Subject(e.run, events.RunCancelled)

				ev := newEvent(t, e.run, events.RunCancelled, events.EndBody{Reason: events.ReasonApprovalDenied, Detail: "denied by nobody"})
				ev.V, ev.Seq, ev.Prev = events.FormatVersion, tail.Count+1, tail.Hash
				data, err := ev.Encode()
				if err != nil {
					t.Fatal(err)
				}
				// The carrier: a "decision" the operator may publish,
				// under ev's id as an append of ev would store it.
				e.relay(t, relay, runStream, target, data, nats.Header{jetstream.MsgIDHeader: {ev.ID}})

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
