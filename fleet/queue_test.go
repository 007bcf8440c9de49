package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestQueue_NudgesAreDeduplicated: a run has at most one nudge waiting,
// however often it is nudged, and a second nudge is not an error.
func TestQueue_NudgesAreDeduplicated(t *testing.T) {
	js := testkit.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, _, err := fleet.Setup(ctx, js.JS, fleet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, why := range []string{"created", "created", "decided-1", "moved-3"} {
		if err := q.Nudge(ctx, "r1", why); err != nil {
			t.Fatalf("nudge %s: %v", why, err)
		}
	}
	if err := q.Nudge(ctx, "r2", "created"); err != nil {
		t.Fatal(err)
	}
	s, err := js.JS.Stream(ctx, q.Config().WorkStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("work stream holds %d nudges, want 2 (one per run)", info.State.Msgs)
	}
	if _, _, err := fleet.Setup(ctx, js.JS, fleet.Config{}); err != nil {
		t.Errorf("second Setup: %v, want it idempotent", err)
	}
	if err := (fleet.Config{AckWait: time.Millisecond}).Validate(); err == nil {
		t.Error("an ack wait of 1ms: got nil error")
	}
}
