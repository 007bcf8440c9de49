package model_test

import (
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/events"
	"github.com/nats-io/nkeys"
)

var operatorKey nkeys.KeyPair

// operator is the one operator every harness trusts.
func operator(t *testing.T) (nkeys.KeyPair, approvals.Operators) {
	t.Helper()
	if operatorKey == nil {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatalf("create operator key: %v", err)
		}
		operatorKey = kp
	}
	pub, err := operatorKey.PublicKey()
	if err != nil {
		t.Fatalf("operator public key: %v", err)
	}
	return operatorKey, approvals.Operators{pub: "alice"}
}

// grant signs a grant of the approval run waits on and publishes it, as an
// operator does; the next drive records and acts on it.
func grant(t *testing.T, h *harness, run string) {
	t.Helper()
	ctx := t.Context()
	r, err := h.d.Load(ctx, run)
	if err != nil {
		t.Fatalf("load %s: %v", run, err)
	}
	v := r.View()
	a := v.PendingApproval()
	if a == nil {
		t.Fatalf("run %s (%s): no pending approval", run, v.Run.Status)
	}
	kp, _ := operator(t)
	if _, err := client.New(h.log, nil).Decide(ctx, kp, run, a.ID, client.Decision{Decision: events.DecisionGrant, Reason: "checked", At: a.Requested.Add(time.Millisecond)}); err != nil {
		t.Fatalf("grant: %v", err)
	}
}
