package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/jsonform"
)

// Side-effect classes a tool declares when it is registered.
const (
	ReadOnly       = "read_only"
	LocalMutation  = "local_mutation"
	RemoteMutation = "remote_mutation"
	Destructive    = "destructive"
)

// ToolSpec is a tool as recorded in a run: what the policy saw of it. Hash is
// the SHA-256 (hex) of the spec's other fields in PolicyJSON form (see
// [HashToolSpec]); an approval binds it, so a changed spec cannot inherit an
// old approval.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema"`
	SideEffect  string          `json:"side_effect"`
	TimeoutMS   int64           `json:"timeout_ms"`
	Terminal    bool            `json:"terminal,omitempty"`
	Hash        string          `json:"hash,omitempty"`
}

// Limits bound a run. A zero field means "no limit" for that dimension.
type Limits struct {
	MaxSteps         int   `json:"max_steps,omitempty"`
	MaxFailuresInRow int   `json:"max_failures_in_row,omitempty"`
	MaxRepeats       int   `json:"max_repeats,omitempty"`
	MaxElapsedMS     int64 `json:"max_elapsed_ms,omitempty"`
}

// RunCreatedBody is the body of [RunCreated].
type RunCreatedBody struct {
	Tools  []ToolSpec      `json:"tools"`
	Limits Limits          `json:"limits"`
	Input  json.RawMessage `json:"input,omitempty"`
	// Agent names the agent that drives the run (for the worker to find it).
	Agent string `json:"agent,omitempty"`
}

// RunToolsBody is the body of [RunTools]: the whole new tool set.
type RunToolsBody struct {
	Tools []ToolSpec `json:"tools"`
}

// StepDecidedBody is the body of [StepDecided]: the agent's decision exactly
// as returned. Args holds the argument bytes as a string when they are valid
// UTF-8; otherwise ArgsBytes holds them (base64 in JSON). Either way the bytes
// are kept exactly, malformed or not.
type StepDecidedBody struct {
	Step      int    `json:"step"`
	Tool      string `json:"tool"`
	Args      string `json:"args,omitempty"`
	ArgsBytes []byte `json:"args_bytes,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// RawArgs returns the argument bytes exactly as the agent returned them.
func (d StepDecidedBody) RawArgs() []byte {
	if d.ArgsBytes != nil {
		return d.ArgsBytes
	}
	return []byte(d.Args)
}

// ApprovalRequest is the approval a policy result asks for.
type ApprovalRequest struct {
	ID           string          `json:"id"`
	Kind         string          `json:"kind"`
	Reason       string          `json:"reason,omitempty"`
	Capability   json.RawMessage `json:"capability"`
	Presentation json.RawMessage `json:"presentation"`
	// Hash is the approval hash (hex SHA-256) binding kind, capability,
	// presentation and the exact request.
	Hash      string     `json:"hash"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Origins of a policy result.
const (
	OriginPolicy   = ""         // the run's policy decided
	OriginRecovery = "recovery" // the runtime raised it for an interrupted call
)

// PolicyBody is the body of [StepPolicy] and [ApprovalRequested].
type PolicyBody struct {
	Step     int    `json:"step"`
	Outcome  string `json:"outcome"`
	Reason   string `json:"reason,omitempty"`
	PolicyID string `json:"policy_id,omitempty"`
	// Args is the request's arguments in PolicyJSON form, as the policy was
	// handed them.
	Args json.RawMessage `json:"args,omitempty"`
	// ToolHash is the hash of the tool spec the policy was handed.
	ToolHash string           `json:"tool_hash,omitempty"`
	Approval *ApprovalRequest `json:"approval,omitempty"`
	// Consumes names the granted approval this result uses up. Only one
	// result can consume a grant: it is one fenced append.
	Consumes string `json:"consumes,omitempty"`
	Origin   string `json:"origin,omitempty"`
	// Resume is true when the evaluation was made on resuming a paused step.
	Resume bool `json:"resume,omitempty"`
}

// Observation kinds.
const (
	ObsResult           = "result"
	ObsToolError        = "tool_error"
	ObsTimeout          = "timeout"
	ObsInvalidDecision  = "invalid_decision"
	ObsInvalidArguments = "invalid_arguments"
	ObsUnknownTool      = "unknown_tool"
	ObsPolicyDenied     = "policy_denied"
)

// ObservedBody is the body of [StepObserved].
type ObservedBody struct {
	Step      int    `json:"step"`
	Kind      string `json:"kind"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated,omitempty"`
}

// Resolutions of an interrupted call.
const (
	ResolvedDone    = "reconciled_done"     // the tool says it took effect; Observation holds its result
	ResolvedNotDone = "reconciled_not_done" // the tool says it did not; the step is evaluated again
	ResolvedRerun   = "rerun_read_only"     // a read-only tool may simply run again
)

// InterruptedBody is the body of [StepInterrupted].
type InterruptedBody struct {
	Step        int           `json:"step"`
	Resolution  string        `json:"resolution"`
	Observation *ObservedBody `json:"observation,omitempty"`
}

// Decisions an operator can make.
const (
	Grant = "grant"
	Deny  = "deny"
)

// DecisionBody is the body of [ApprovalGranted] and [ApprovalDenied]: an
// operator's decision, signed over the run, the approval id, the hash and the
// decision.
type DecisionBody struct {
	Approval  string    `json:"approval"`
	Hash      string    `json:"hash"`
	Decision  string    `json:"decision"`
	Operator  string    `json:"operator"`
	Reason    string    `json:"reason,omitempty"`
	Signed    time.Time `json:"signed"`
	Signature string    `json:"signature"`
}

// ExpiredBody is the body of [ApprovalExpired].
type ExpiredBody struct {
	Approval string `json:"approval"`
}

// RefusedBody is the body of [ApprovalRefused].
type RefusedBody struct {
	Approval string `json:"approval"`
	// Event is the id of the decision event that was refused.
	Event    string `json:"event"`
	Operator string `json:"operator,omitempty"`
	Reason   string `json:"reason"`
}

// End reasons.
const (
	ReasonCompleted        = "completed"
	ReasonPolicyAbort      = "policy_abort"
	ReasonInternalError    = "internal_error"
	ReasonRepeatedFailures = "repeated_tool_failures"
	ReasonStepLimit        = "step_limit"
	ReasonLoopDetected     = "loop_detected"
	ReasonTimeLimit        = "time_limit"
	ReasonApprovalDenied   = "approval_denied"
	ReasonApprovalExpired  = "approval_expired"
	ReasonCancelled        = "cancelled"
	ReasonAgentError       = "agent_error"
	ReasonBudgetExceeded   = "budget_exceeded"
)

// OutcomeError is the outcome recorded for a policy evaluation the runtime
// could not use: the policy returned an error, an outcome outside the four,
// or approval JSON that fails the boundary.
const OutcomeError = "error"

// EndBody is the body of [RunFinished], [RunFailed] and [RunCancelled].
type EndBody struct {
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	// Result is the terminal tool's result, or the agent's final answer,
	// for a finished run.
	Result string `json:"result,omitempty"`
	// Policy is the evaluation that failed the run, for a run failed as
	// internal_error by its policy: outcome [OutcomeError], the reason, and
	// the request as the policy was handed it, so replay can re-check it.
	Policy *PolicyBody `json:"policy,omitempty"`
}

// HashToolSpec returns the hash a recorded spec carries: the hex SHA-256 of
// its fields, Hash excluded, in PolicyJSON form. It fails only for a schema
// that is not boundary-clean JSON.
func HashToolSpec(s ToolSpec) (string, error) {
	s.Hash = ""
	b, err := jsonform.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("hash tool spec %s: %w", s.Name, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// ModelUsage is what model calls use of a run's budget: calls (attempts),
// input and output tokens, and spend in nano-USD (10^-9 US dollars), so a
// price table of dollars per million tokens charges whole numbers.
type ModelUsage struct {
	Calls        int   `json:"calls,omitempty"`
	InputTokens  int64 `json:"input_tokens,omitempty"`
	OutputTokens int64 `json:"output_tokens,omitempty"`
	SpendNanoUSD int64 `json:"spend_nano_usd,omitempty"`
}

// Add returns u plus o.
func (u ModelUsage) Add(o ModelUsage) ModelUsage {
	return ModelUsage{
		Calls:        u.Calls + o.Calls,
		InputTokens:  u.InputTokens + o.InputTokens,
		OutputTokens: u.OutputTokens + o.OutputTokens,
		SpendNanoUSD: u.SpendNanoUSD + o.SpendNanoUSD,
	}
}

// SideEffectNone is the side effect every model attempt records: asking a
// model again has no effect outside the run, so an attempt whose outcome
// is unknown (its worker died) is charged and asked again, never
// reconciled.
const SideEffectNone = "none"

// ModelAttemptBody is the body of [ModelAttempted]. Call numbers a run's
// model calls from 1 (a call is answered by one reply); Attempt numbers
// the attempts of one call from 1.
type ModelAttemptBody struct {
	Call       int        `json:"call"`
	Attempt    int        `json:"attempt"`
	Provider   string     `json:"provider"`
	Model      string     `json:"model"`
	Reserve    ModelUsage `json:"reserve"`
	SideEffect string     `json:"side_effect"`
}

// ModelToolCall is one tool call of a model's reply; Args holds the
// arguments exactly as the model sent them.
type ModelToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Args string `json:"args"`
}

// ModelReplyBody is the body of [ModelReplied]: the reply as the agent
// reads it (its text, refusal, tool calls and finish reason), what it
// used, and Response, the reply's body exactly as received.
type ModelReplyBody struct {
	Call      int             `json:"call"`
	Attempt   int             `json:"attempt"`
	Finish    string          `json:"finish,omitempty"`
	Text      string          `json:"text,omitempty"`
	Refusal   string          `json:"refusal,omitempty"`
	ToolCalls []ModelToolCall `json:"tool_calls,omitempty"`
	Usage     ModelUsage      `json:"usage"`
	LatencyMS int64           `json:"latency_ms"`
	Response  string          `json:"response,omitempty"`
	// ResponseOmitted is the size of a response body too large to keep
	// (Response is empty then): the rest of the body is still recorded.
	ResponseOmitted int `json:"response_omitted,omitempty"`
}

// ModelFailBody is the body of [ModelFailed]: why the attempt got no
// usable reply, whether asking again may help, and what it is charged
// (its whole reservation when the outcome is unknown, a timeout say).
type ModelFailBody struct {
	Call         int        `json:"call"`
	Attempt      int        `json:"attempt"`
	Status       int        `json:"status,omitempty"`
	Error        string     `json:"error"`
	Retryable    bool       `json:"retryable,omitempty"`
	RetryAfterMS int64      `json:"retry_after_ms,omitempty"`
	Charge       ModelUsage `json:"charge"`
	LatencyMS    int64      `json:"latency_ms"`
}
