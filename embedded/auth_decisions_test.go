package embedded_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestDecisions_WhatTheOperatorUserPublishesIsJudgedOnce: everything the
// operator user can write on a run's decision subject, from outside, with
// its own connection, and what a worker (the worker user's driver) makes of
// it: garbage and a value of exactly the stream's limit are each refused
// and recorded once; a value over the limit is refused by the server and
// never stored; a signed grant published twice under one message id is
// stored once and consumed once; the same grant copied under a new id, for
// a later approval of the very same request, is refused. The call runs once.
func TestDecisions_WhatTheOperatorUserPublishesIsJudgedOnce(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	ctx := t.Context()
	const run = "run-copies"
	r, err := e.d.Create(ctx, run, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	twice := testkit.NewScript(testkit.Call("send", `{"to":"ops"}`), testkit.Call("send", `{"to":"ops"}`), testkit.Call("done", `{}`))
	drive := func() {
		t.Helper()
		if err := e.d.Drive(ctx, r, twice); err != nil {
			t.Fatalf("drive as worker: %v", err)
		}
	}
	drive()
	opLog, err := events.Attach(ctx, e.operator.js, events.Config{})
	if err != nil {
		t.Fatalf("attach as operator: %v", err)
	}
	subject := decisions.Subject(opLog, run)

	// Garbage, and garbage of exactly the limit: stored, refused once each.
	atLimit := e.publishGarbage(t, subject)
	// Over the limit: the server refuses it; nothing is stored.
	if _, err := e.operator.js.Publish(ctx, subject, append(atLimit, ' ')); err == nil {
		t.Fatalf("a decision of %d bytes was stored, over the %d-byte limit", len(atLimit)+1, layout.MaxDecisionBytes)
	}
	// A signed grant, published twice under its message id: stored once.
	v := r.View()
	first := *v.PendingApproval()
	grant, err := approvals.Sign(e.opKey, run, first.ID, first.Hash, events.DecisionGrant, "ok", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s1, err := approvals.Publish(ctx, opLog, run, grant)
	if err != nil {
		t.Fatalf("operator publishes a grant: %v", err)
	}
	if s2, err := approvals.Publish(ctx, opLog, run, grant); err != nil || s2 != s1 {
		t.Fatalf("the same grant again: sequence %d, %v; want %d (stored once)", s2, err, s1)
	}
	drive()
	if got := e.send.Count(); got != 1 {
		t.Fatalf("send ran %d times after the grant, want 1", got)
	}
	v = r.View()
	second := v.PendingApproval()
	if second == nil || second.Hash != first.Hash || second.ID == first.ID {
		t.Fatalf("after the first send: pending %+v, want a second approval of the same request", second)
	}
	if len(v.Refusals) != 2 {
		t.Errorf("refusals %+v, want the garbage and the value at the limit, once each", v.Refusals)
	}

	// The consumed grant copied under a new message id, for the second
	// approval of the same request: refused, never used.
	data, err := json.Marshal(grant)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decisions.Publish(ctx, opLog, run, "a-copy", data); err != nil {
		t.Fatalf("operator publishes a copy: %v", err)
	}
	drive()
	if got := e.send.Count(); got != 1 {
		t.Errorf("send ran %d times after the copy, want 1", got)
	}
	v = r.View()
	if a := v.PendingApproval(); v.Run.Status != projector.Waiting || a == nil || a.ID != second.ID || a.State != projector.Pending {
		t.Errorf("after the copy: %s, pending %+v; want still waiting on %s", v.Run.Status, a, second.ID)
	}
	if n := len(v.Refusals); n != 3 || !strings.Contains(v.Refusals[n-1].Reason, first.ID) {
		t.Errorf("refusals %+v, want the copy refused as naming %s", v.Refusals, first.ID)
	}
	e.operator.noViolations(t, "publishing on the decision subject")
}

// publishGarbage publishes on subject, as the operator user, a message
// that is no decision and one of exactly the decision stream's limit, and
// returns the latter.
func (e *authEnv) publishGarbage(t *testing.T, subject string) []byte {
	t.Helper()
	if _, err := e.operator.js.Publish(t.Context(), subject, []byte("not a decision")); err != nil {
		t.Fatalf("operator publishes garbage: %v", err)
	}
	atLimit := append([]byte(`{"approval":"`), bytes.Repeat([]byte("x"), layout.MaxDecisionBytes-len(`{"approval":""}`))...)
	atLimit = append(atLimit, `"}`...)
	if _, err := e.operator.js.Publish(t.Context(), subject, atLimit); err != nil {
		t.Fatalf("operator publishes %d bytes (the limit): %v", len(atLimit), err)
	}
	return atLimit
}
