package approvals

import (
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/nats-io/nkeys"
)

// Errors a decision is refused with. [Verify] and [Admit] wrap them.
var (
	ErrUnknownOperator = errors.New("decision signed by a key that is not a configured operator")
	ErrBadSignature    = errors.New("decision signature does not verify")
	ErrWrongHash       = errors.New("decision names another approval hash")
	ErrNotPending      = errors.New("approval is not pending")
	ErrExpired         = errors.New("approval expired before the decision")
	ErrNoApproval      = errors.New("no such approval")
	ErrBadDecision     = errors.New("decision is neither grant nor deny")
)

// Operators maps an operator's public nkey (a "U…" user key) to a name for
// people to read. Only decisions signed by one of these keys are accepted.
type Operators map[string]string

// ParseOperator checks that pub is an ed25519 user public key.
func ParseOperator(pub string) error {
	if !nkeys.IsValidPublicUserKey(pub) {
		return fmt.Errorf("operator key %q is not an nkeys user public key (U…)", pub)
	}
	return nil
}

const signDomain = "arbiter.decision.v1"

// signedBytes is what an operator signs: netstrings of the domain, the run,
// the approval id, its hash, the decision, the operator's public key, the
// signing time and the reason.
func signedBytes(run string, d events.DecisionBody) []byte {
	var out []byte
	for _, p := range []string{signDomain, run, d.Approval, d.Hash, d.Decision, d.Operator, d.Signed.UTC().Format(time.RFC3339Nano), d.Reason} {
		out = append(out, netstring([]byte(p))...)
	}
	return out
}

// Sign builds an operator's decision on an approval of run, signed with kp
// (an nkeys user seed's key pair). decision is [events.DecisionGrant] or
// [events.DecisionDeny].
func Sign(kp nkeys.KeyPair, run, approvalID, hash, decision, reason string, at time.Time) (events.DecisionBody, error) {
	if decision != events.DecisionGrant && decision != events.DecisionDeny {
		return events.DecisionBody{}, fmt.Errorf("sign %q: %w", decision, ErrBadDecision)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return events.DecisionBody{}, fmt.Errorf("sign: %w", err)
	}
	d := events.DecisionBody{Approval: approvalID, Hash: hash, Decision: decision, Operator: pub, Reason: reason, Signed: at.UTC()}
	sig, err := kp.Sign(signedBytes(run, d))
	if err != nil {
		return events.DecisionBody{}, fmt.Errorf("sign: %w", err)
	}
	d.Signature = base64.RawURLEncoding.EncodeToString(sig)
	return d, nil
}

// Verify checks that d is signed by a configured operator over run and its
// own fields. It says nothing about whether the approval is pending: see
// [Admit].
func Verify(ops Operators, run string, d events.DecisionBody) error {
	if d.Decision != events.DecisionGrant && d.Decision != events.DecisionDeny {
		return fmt.Errorf("%w: %q", ErrBadDecision, d.Decision)
	}
	if _, ok := ops[d.Operator]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownOperator, d.Operator)
	}
	kp, err := nkeys.FromPublicKey(d.Operator)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnknownOperator, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(d.Signature)
	if err != nil {
		return fmt.Errorf("%w: signature is not base64url: %v", ErrBadSignature, err)
	}
	if err := kp.Verify(signedBytes(run, d), sig); err != nil {
		return fmt.Errorf("%w: operator %s (%s)", ErrBadSignature, ops[d.Operator], d.Operator)
	}
	return nil
}
