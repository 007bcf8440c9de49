package events

// Outcome is what a policy answered, as a policy result records it. A policy
// answers one of the four; [OutcomeError] is recorded only by the runtime,
// for an evaluation that gave no answer it can act on.
type Outcome string

// The four outcomes a policy answers, and the runtime's own.
const (
	Allow           Outcome = "allow"
	Deny            Outcome = "deny"
	Abort           Outcome = "abort"
	RequireApproval Outcome = "require_approval"
	// OutcomeError is the outcome recorded for a policy evaluation the
	// runtime could not use: the policy returned an error, an outcome
	// outside the four, or approval JSON that fails the boundary.
	OutcomeError Outcome = "error"
)

// Valid reports whether o is one of the four outcomes a policy answers
// ([OutcomeError] is not: no policy may answer it).
func (o Outcome) Valid() bool {
	switch o {
	case Allow, Deny, Abort, RequireApproval:
		return true
	}
	return false
}
