package embedded_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/arbiter-run/arbiter/events"
)

// TestPermissions_ARelayedReplyIsNeverAnEvent: NATS checks a publisher's
// subject against its permissions, not the reply subject it names, and a
// JetStream API reply goes to that reply subject, where the runs stream
// stores it. So the operator user, which may not publish on any run
// subject, can still have the server store there: a stream's info, a
// message get's JSON, or (with a direct get) the exact bytes of one of the
// run's own events, with its headers or with none. Each relay is made for
// real (the runs stream's last sequence moves: the store happened) and
// none is believed: the worker's read refuses the run as broken. (Bytes of
// the operator's own choosing it can no longer have served at all: see
// TestPermissions_OperatorServesNoHeaderBlockOfItsOwn.)
func TestPermissions_ARelayedReplyIsNeverAnEvent(t *testing.T) {
	for _, shards := range shardCases {
		for _, relay := range relays {
			if relay == "direct get with its headers" {
				// The copy carries the event's own message id and fence:
				// the runs stream stores none of it (a duplicate, or a
				// wrong last sequence).
				continue
			}
			t.Run(fmt.Sprintf("%s/%s", shardName(shards), relay), func(t *testing.T) {
				e := newAuthEnv(t, events.Config{Shards: shards})
				ctx := t.Context()
				e.pendingApproval(t)
				runStream := e.log.StreamName(e.log.Shard(e.run))
				target := e.log.Subject(e.run, events.RunCancelled)
				e.relay(t, relay, runStream, target)

				r, err := e.d.Load(ctx, e.run)
				if err == nil {
					t.Fatalf("the worker read the run after a %s relay onto %s: %s (%s), want it refused as broken", relay, target, r.View().Run.Status, r.View().Run.Reason)
				}
				if !errors.Is(err, events.ErrBrokenChain) && !errors.Is(err, events.ErrMalformed) {
					t.Errorf("load after a %s relay: %v, want a broken chain", relay, err)
				}
				if _, err := e.log.Tail(ctx, e.run); err == nil && relay == "direct get with no headers" {
					t.Errorf("Tail believed the relayed event")
				}
			})
		}
	}
}
