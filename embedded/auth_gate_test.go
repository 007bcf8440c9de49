package embedded_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/policy"
)

// TestDecisions_AGateTakesInWhatTheOperatorUserPublishesOnce: a gate run
// on the worker user's log takes in decisions outside any drive (its
// TakeIn, which the gateway's status tool, its other calls and its timer
// use). What the operator user publishes there, from outside, with its
// own connection: garbage and a value of exactly the limit are refused and
// recorded once each, however often the gate looks; a signed grant
// published twice under its id is recorded once, run nothing by itself,
// and is consumed once by the call it grants.
func TestDecisions_AGateTakesInWhatTheOperatorUserPublishesOnce(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	ctx := t.Context()
	pub, _ := e.opKey.PublicKey()
	g, err := gate.New(gate.Config{
		Log: e.log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"), Operators: approvals.Operators{pub: "alice"},
		Tools: []driver.Spec{{Name: "send", Description: "send", Schema: json.RawMessage(sendSchema), SideEffect: events.RemoteMutation, Timeout: 5 * time.Second}},
	})
	if err != nil {
		t.Fatal(err)
	}
	const run = "gate-take-in"
	r, err := g.Open(ctx, run, "program", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	args := json.RawMessage(`{"to":"ops"}`)
	p, err := r.Ask(ctx, "send", args)
	if err != nil || p.Verdict != gate.Pending {
		t.Fatalf("ask: %+v, %v; want pending", p, err)
	}
	opLog, err := events.Attach(ctx, e.operator.js, events.Config{})
	if err != nil {
		t.Fatalf("attach as operator: %v", err)
	}
	subject := decisions.Subject(opLog, run)
	e.publishGarbage(t, subject)
	grant, err := approvals.Sign(e.opKey, run, p.Approval.ID, p.Approval.Hash, events.DecisionGrant, "ok", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := approvals.Publish(ctx, opLog, run, grant); err != nil {
			t.Fatalf("operator publishes a grant: %v", err)
		}
	}
	for range 3 {
		if err := r.TakeIn(ctx); err != nil {
			t.Fatalf("take in: %v", err)
		}
	}
	count := func(k events.Kind) int {
		recs, _, err := e.log.Read(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, rec := range recs {
			if rec.Event.Kind == k {
				n++
			}
		}
		return n
	}
	if n, g := count(events.ApprovalRefused), count(events.ApprovalGranted); n != 2 || g != 1 || count(events.StepObserved) != 0 {
		t.Fatalf("after three take-ins: %d refusals, %d grants recorded, %d observations; want 2, 1 and nothing run", n, g, count(events.StepObserved))
	}
	a, err := r.Ask(ctx, "send", args)
	if err != nil || a.Verdict != gate.Allow {
		t.Fatalf("the granted call: %+v, %v; want it allowed", a, err)
	}
	if _, err := r.Report(ctx, "sent", nil); err != nil {
		t.Fatal(err)
	}
	again, err := r.Ask(ctx, "send", args)
	if err != nil || again.Verdict != gate.Pending || again.Approval.ID == p.Approval.ID {
		t.Fatalf("the same call again: %+v, %v; want a new approval (the grant is used)", again, err)
	}
}
