package fleet_test

import (
	"context"
	"strings"
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

// TestQueue_AFullStreamIsNoNudgeWaiting: the server refuses a store with
// one code both when the run's subject has its nudge waiting (not an
// error: the run will be looked at) and when the stream is full; the
// second loses the nudge and must be said.
func TestQueue_AFullStreamIsNoNudgeWaiting(t *testing.T) {
	e := newEnv(t, fleet.Config{})
	ctx, js, q := t.Context(), e.js, e.q
	s, err := js.JS.Stream(ctx, q.Config().WorkStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs = 1
	if _, err := js.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := q.Nudge(ctx, "r1", "created"); err != nil {
		t.Fatal(err)
	}
	if err := q.Nudge(ctx, "r1", "moved-2"); err != nil {
		t.Errorf("a second nudge of r1, waiting already: %v", err)
	}
	err = q.Nudge(ctx, "r2", "created")
	if err == nil || !strings.Contains(err.Error(), "maximum messages exceeded") {
		t.Errorf("a nudge of r2 into a full stream: %v, want the server's refusal", err)
	}
}
