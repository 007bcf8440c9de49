package decisions_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestPublish_ADuplicateIsBelievedOnlyWithItsBytes: a decision published
// again under its id (a retry) is the one stored; a decision whose id
// another message took first, on another run's subject or its own, is
// not stored and says so, rather than return that message's sequence as
// its own.
func TestPublish_ADuplicateIsBelievedOnlyWithItsBytes(t *testing.T) {
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	ctx := t.Context()
	data := []byte(`{"decision":"grant"}`)
	seq, err := decisions.Publish(ctx, log, "run-a", "decision-1", data)
	if err != nil {
		t.Fatal(err)
	}
	again, err := decisions.Publish(ctx, log, "run-a", "decision-1", data)
	if err != nil || again != seq {
		t.Fatalf("a retry: seq %d, %v; want %d, nil", again, err, seq)
	}
	for _, taken := range []struct{ subject, id string }{
		{decisions.Subject(log, "run-b"), "decision-2"},
		{decisions.Subject(log, "run-a"), "decision-3"},
	} {
		body := []byte(`{"decision":"deny"}`)
		if taken.subject == decisions.Subject(log, "run-b") {
			body = data // the same bytes, on another run
		}
		if _, err := js.JS.PublishMsg(ctx, &nats.Msg{Subject: taken.subject, Data: body}, jetstream.WithMsgID(taken.id)); err != nil {
			t.Fatal(err)
		}
		got, err := decisions.Publish(ctx, log, "run-a", taken.id, data)
		if !errors.Is(err, decisions.ErrIDTaken) {
			t.Errorf("id %s taken on %s: seq %d, %v; want %v", taken.id, taken.subject, got, err, decisions.ErrIDTaken)
		}
	}
}
