package events

import "fmt"

// Kind names what an event records. The set is closed: a reader that meets a
// kind it does not know must refuse the event rather than skip it.
type Kind string

// The kinds of a run's life. The subject token of each is the kind itself, so
// a subscriber can filter with arb.run.*.approval.> and see every approval.
const (
	// RunCreated starts a run: its tool specs (each with its hash), its limits
	// and its input. Body: [RunCreatedBody].
	RunCreated Kind = "run.created"
	// RunTools records a change of the tool set (for replay: the specs a
	// later evaluation saw). Body: [RunToolsBody].
	RunTools Kind = "run.tools"
	// StepDecided records the agent's decision exactly as it was returned.
	// When the policy's first answer on it is allow, deny or abort, that
	// answer travels in the same event (StepDecidedBody.Policy, ADR 0017)
	// and is, like a [StepPolicy] event, acknowledged before anything acts
	// on it. Body: [StepDecidedBody].
	StepDecided Kind = "step.decided"
	// StepPolicy records a policy result whose outcome is allow, deny or
	// abort, when it is not carried by its decision's event: a resume, a
	// consumed grant, a recovery, or a pair too large for one event. An
	// allow is the write-ahead record of an execution: it is acknowledged
	// before the tool runs. Body: [PolicyBody].
	StepPolicy Kind = "step.policy"
	// StepObserved records what came of a step: the tool's result or error,
	// an invalid decision, a timeout. Body: [ObservedBody].
	StepObserved Kind = "step.observed"
	// StepInterrupted records how a call found allowed but never observed
	// (its worker died) was resolved. Body: [InterruptedBody].
	StepInterrupted Kind = "step.interrupted"
	// ApprovalRequested records a policy result whose outcome is
	// require_approval (or the runtime's own interrupted_side_effect
	// approval): one event that is both the result and the request.
	// Body: [PolicyBody] with Approval set.
	ApprovalRequested Kind = "approval.requested"
	// ApprovalGranted and ApprovalDenied are an operator's signed decision.
	// Body: [DecisionBody].
	ApprovalGranted Kind = "approval.granted"
	ApprovalDenied  Kind = "approval.denied"
	// ApprovalExpired records that an approval's deadline passed with no
	// decision. It is never a denial. Body: [ExpiredBody].
	ApprovalExpired Kind = "approval.expired"
	// ApprovalRefused records a decision that was not accepted (bad
	// signature, unknown key, wrong hash, already decided, expired) and why.
	// Body: [RefusedBody].
	ApprovalRefused Kind = "approval.refused"
	// RunFinished, RunFailed and RunCancelled end a run. Body: [EndBody].
	RunFinished  Kind = "run.finished"
	RunFailed    Kind = "run.failed"
	RunCancelled Kind = "run.cancelled"
	// ModelAttempted records a request to a model before it is sent: which
	// call and attempt it is and what it reserves of the run's budget.
	// Body: [ModelAttemptBody].
	ModelAttempted Kind = "model.attempted"
	// ModelReplied records a model's reply to the attempt before it.
	// Body: [ModelReplyBody].
	ModelReplied Kind = "model.replied"
	// ModelFailed records an attempt that got no usable reply.
	// Body: [ModelFailBody].
	ModelFailed Kind = "model.failed"
	// ApprovalBudget records that a run's next model call would pass its
	// budget and that the run waits for an operator to raise it: an
	// approval of kind [BudgetApproval], of no step. The agent records it,
	// through the driver's recorder, in place of the attempt. A grant is
	// used by the attempt that names it ([ModelAttemptBody.Grant]); a
	// denial or an expiry ends the run budget_exceeded. Body: [BudgetBody].
	ApprovalBudget Kind = "approval.budget"
)

// Kinds lists every kind, in the order above.
var Kinds = []Kind{
	RunCreated, RunTools, StepDecided, StepPolicy, StepObserved, StepInterrupted,
	ApprovalRequested, ApprovalGranted, ApprovalDenied, ApprovalExpired, ApprovalRefused,
	RunFinished, RunFailed, RunCancelled,
	ModelAttempted, ModelReplied, ModelFailed, ApprovalBudget,
}

// Valid reports whether k is one of [Kinds].
func (k Kind) Valid() bool {
	for _, x := range Kinds {
		if k == x {
			return true
		}
	}
	return false
}

// Terminal reports whether an event of kind k ends its run.
func (k Kind) Terminal() bool {
	return k == RunFinished || k == RunFailed || k == RunCancelled
}

// Model reports whether k records a model call (an agent's, not the
// driver's): [ModelAttempted], [ModelReplied] or [ModelFailed].
func (k Kind) Model() bool {
	return k == ModelAttempted || k == ModelReplied || k == ModelFailed
}

// Agent reports whether an agent may record k through the driver's
// recorder: a model call's kinds and [ApprovalBudget].
func (k Kind) Agent() bool { return k.Model() || k == ApprovalBudget }

func (k Kind) check() error {
	if !k.Valid() {
		return fmt.Errorf("%w: unknown event kind %q", ErrMalformed, string(k))
	}
	return nil
}
