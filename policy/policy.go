// Package policy owns the contract between the runtime and the code that
// decides whether a requested tool call runs: the [Policy] interface, the
// [Ruling] it answers (one of the four [events.Outcome]s), the [Request]
// it is handed, identities, approvals asked for with [NeedApproval], and
// the built-in [SideEffectPolicy].
//
// A policy is a pure function of the request and the run view. This package
// must not execute tools, append events or talk to the network.
package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// Request is the tool call a policy decides on. Args and Tool.Schema are in
// PolicyJSON form, the same bytes in the loop, on resume and in replay.
type Request struct {
	Run  string
	Step int
	Tool events.ToolSpec
	Args json.RawMessage
}

// Copy returns r with its own copies of the argument and schema bytes: what
// the runtime hands a policy, so a policy that writes through its request
// changes nothing the runtime records or executes.
func (r Request) Copy() Request {
	r.Args = append(json.RawMessage(nil), r.Args...)
	r.Tool.Schema = append(json.RawMessage(nil), r.Tool.Schema...)
	return r
}

// Approval is what a require_approval decision asks an operator to grant.
// Capability and Presentation are JSON; both are hashed with the exact
// request, so a grant applies to nothing else.
type Approval struct {
	Kind         string
	Capability   json.RawMessage
	Presentation json.RawMessage
	// ExpiresIn, when positive, bounds how long the approval waits for a
	// decision; zero takes the runtime's configured default.
	ExpiresIn time.Duration
}

// Ruling is a policy's answer.
type Ruling struct {
	Outcome  events.Outcome
	Reason   string
	Approval *Approval
	// Parts, when set, is recorded with the result: what each member of a
	// composed policy, or each rule of a rules file, answered.
	Parts []events.PolicyPart
}

// Policy decides whether a request runs. Evaluate must not keep or change
// the view it is handed (it is a copy, so changing it changes nothing the
// runtime sees). An error fails the run closed.
type Policy interface {
	Evaluate(ctx context.Context, req Request, view projector.View) (Ruling, error)
}

// IdentifiedPolicy is a policy that names itself. Its id is recorded with
// every result it gives, so a replay can tell whether the policy it is given
// is the one that decided. Change it whenever a decision could change.
type IdentifiedPolicy interface {
	Policy
	PolicyID() string
}

// MaxIDLen bounds a policy id.
const MaxIDLen = 256

// ErrBadID marks a policy id that cannot be recorded.
var ErrBadID = errors.New("unusable policy id")

// ValidateID checks a policy id: at most [MaxIDLen] bytes, valid UTF-8, no
// control characters. Errors wrap [ErrBadID] and quote the id.
func ValidateID(id string) error {
	switch {
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: %d bytes (at most %d): %.40q…", ErrBadID, len(id), MaxIDLen, id)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrBadID, id)
	}
	for i, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %q holds control character %U at byte %d", ErrBadID, id, r, i)
		}
	}
	return nil
}

// ID returns p's id, or "" if p does not implement [IdentifiedPolicy].
func ID(p Policy) string {
	if ip, ok := p.(IdentifiedPolicy); ok {
		return ip.PolicyID()
	}
	return ""
}

type named struct {
	Policy
	id string
}

func (n named) PolicyID() string { return n.id }

// WithID gives p the identity id.
func WithID(p Policy, id string) IdentifiedPolicy { return named{Policy: p, id: id} }
