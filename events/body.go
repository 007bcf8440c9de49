package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/jsonform"
)

// SideEffect is the class of effect a tool declares when it is registered
// (what the built-in policy maps to an outcome), or [SideEffectNone] for a
// model attempt.
type SideEffect string

// Side-effect classes a tool declares when it is registered.
const (
	ReadOnly       SideEffect = "read_only"
	LocalMutation  SideEffect = "local_mutation"
	RemoteMutation SideEffect = "remote_mutation"
	Destructive    SideEffect = "destructive"
)

// SideEffects lists the classes a tool may declare, from the mildest.
var SideEffects = []SideEffect{ReadOnly, LocalMutation, RemoteMutation, Destructive}

// Valid reports whether s is one of [SideEffects] ([SideEffectNone] is not:
// no tool may declare it).
func (s SideEffect) Valid() bool {
	for _, c := range SideEffects {
		if s == c {
			return true
		}
	}
	return false
}

// ToolSpec is a tool as recorded in a run: what the policy saw of it. Hash is
// the SHA-256 (hex) of the spec's other fields in PolicyJSON form (see
// [HashToolSpec]); an approval binds it, so a changed spec cannot inherit an
// old approval.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema"`
	SideEffect  SideEffect      `json:"side_effect"`
	TimeoutMS   int64           `json:"timeout_ms"`
	Terminal    bool            `json:"terminal,omitempty"`
	// Pin is what the tool was reviewed as, when its definition comes from
	// outside the runtime (an MCP server's pinned tool hash); empty for a
	// built-in tool.
	Pin string `json:"pin,omitempty"`
	// Fixed holds arguments the runtime sets on every call, hidden from the
	// model, as one JSON object in PolicyJSON form; empty for none.
	Fixed string `json:"fixed,omitempty"`
	Hash  string `json:"hash,omitempty"`
	// Data names the categories of data the tool touches ("financial.card",
	// "ssn"), for the data targets of rules files. Empty: none declared.
	Data []string `json:"data,omitempty"`
	// Tags are free labels, matched by the operation targets of rules files.
	Tags []string `json:"tags,omitempty"`
	// Resource names the top-level argument that holds what the call acts on
	// (a URL, a path), matched by the resource targets of rules files.
	Resource string `json:"resource,omitempty"`
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
	// Actor is who asked for the run; nil: nobody named.
	Actor *Actor `json:"actor,omitempty"`
	// Surface is where the request came from ("api", "mcp", "cli").
	Surface string `json:"surface,omitempty"`
	// Withheld are the tools known and not offered when the run was made.
	Withheld []WithheldTool `json:"withheld,omitempty"`
}

// Actor is who asked for a run: what policies may condition on.
type Actor struct {
	ID         string            `json:"id"`
	Roles      []string          `json:"roles,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Clone returns a copy of a that shares nothing with it.
func (a *Actor) Clone() *Actor {
	if a == nil {
		return nil
	}
	c := &Actor{ID: a.ID}
	if a.Roles != nil {
		c.Roles = append([]string{}, a.Roles...)
	}
	if a.Attributes != nil {
		c.Attributes = make(map[string]string, len(a.Attributes))
		for k, v := range a.Attributes {
			c.Attributes[k] = v
		}
	}
	return c
}

// RunToolsBody is the body of [RunTools]: the whole new tool set.
type RunToolsBody struct {
	Tools []ToolSpec `json:"tools"`
	// Withheld are the tools the runtime knows of and does not offer now,
	// with why (see [WithheldTool]).
	Withheld []WithheldTool `json:"withheld,omitempty"`
}

// WithheldTool is a tool the runtime knows of and refuses to offer: an MCP
// tool that is not as it was reviewed and pinned (changed, new, renamed,
// gone, unusable). It is recorded on every run it is withheld from, at the
// point it was, so the run's own log says what was refused and why; the
// agent is not shown it, and a request for it is refused as unknown.
type WithheldTool struct {
	// Name is the name it is, or would be, offered under.
	Name   string `json:"name"`
	Server string `json:"server,omitempty"`
	// Status is why: changed, new, renamed, missing or unusable.
	Status string `json:"status"`
	// Change says what differs from what was reviewed.
	Change string `json:"change,omitempty"`
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
	// Oversize is set when the decision was too large to record: Tool,
	// Args, CallID and Reason then hold only a prefix of each, and the
	// decision is refused (an invalid_decision observation) without being
	// checked or shown to the policy.
	Oversize *Oversize `json:"oversize,omitempty"`
	// Policy is the policy's result for this decision when it was recorded
	// in the same event (see ADR 0017): an allow, deny or abort on the
	// decision as first evaluated, never an approval request, a consumed
	// grant or a resume, which are events of their own. A step recorded
	// this way costs one durable append fewer; it folds exactly as the
	// decision followed by a [StepPolicy] event with this body.
	Policy *PolicyBody `json:"policy,omitempty"`
}

// Oversize describes a decision too large to record whole.
type Oversize struct {
	// Bytes is the decision's size: its tool name, arguments, call id and
	// reason together.
	Bytes int `json:"bytes"`
	// SHA256 is the hex SHA-256 of the arguments as the agent sent them.
	SHA256 string `json:"sha256"`
	// Limit is the size the driver records whole.
	Limit int `json:"limit"`
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
	Step     int     `json:"step"`
	Outcome  Outcome `json:"outcome"`
	Reason   string  `json:"reason,omitempty"`
	PolicyID string  `json:"policy_id,omitempty"`
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
	// Parts is what made up the outcome, for a composed or rules policy:
	// each member's (or rule's) id, outcome and reason, in the policy's order.
	Parts []PolicyPart `json:"parts,omitempty"`
	// Shadow is what a candidate policy, run beside the enforcing one and
	// never enforced, answered for the same request.
	Shadow *ShadowBody `json:"shadow,omitempty"`
}

// ShadowBody is a shadow policy's answer, recorded and never acted on.
type ShadowBody struct {
	PolicyID string `json:"policy_id"`
	// Outcome is one of the four, or [OutcomeError] when the candidate
	// failed (its error in Reason).
	Outcome      Outcome      `json:"outcome"`
	Reason       string       `json:"reason,omitempty"`
	ApprovalKind string       `json:"approval_kind,omitempty"`
	Parts        []PolicyPart `json:"parts,omitempty"`
}

// PolicyPart is one member's or rule's share of a recorded policy result.
type PolicyPart struct {
	ID      string  `json:"id"`
	Outcome Outcome `json:"outcome"`
	Reason  string  `json:"reason,omitempty"`
	// Code is a machine-readable reason ("REFUND_TOO_LARGE").
	Code string `json:"code,omitempty"`
	// Mode is how a rule was enforced (block, confirm, warn, audit); a warn
	// or audit part is recorded and decided nothing.
	Mode string `json:"mode,omitempty"`
	// Window names the fleet-wide counter a rate rule read, and Count what
	// it held before this call: the reading a replay re-checks against.
	Window string `json:"window,omitempty"`
	Count  int64  `json:"count,omitempty"`
}

// ObservationKind says what came of a step, as [ObservedBody] records it.
type ObservationKind string

// Observation kinds.
const (
	ObsResult           ObservationKind = "result"
	ObsToolError        ObservationKind = "tool_error"
	ObsTimeout          ObservationKind = "timeout"
	ObsInvalidDecision  ObservationKind = "invalid_decision"
	ObsInvalidArguments ObservationKind = "invalid_arguments"
	ObsUnknownTool      ObservationKind = "unknown_tool"
	ObsPolicyDenied     ObservationKind = "policy_denied"
)

// ObservedBody is the body of [StepObserved].
type ObservedBody struct {
	Step      int             `json:"step"`
	Kind      ObservationKind `json:"kind"`
	Content   string          `json:"content"`
	Truncated bool            `json:"truncated,omitempty"`
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
	DecisionGrant = "grant"
	DecisionDeny  = "deny"
)

// DecisionBody is an operator's decision, signed over the run, the
// approval id, the hash, the decision, the operator, the signing time and
// the reason. An operator publishes it on the run's decision subject (see
// approvals.Publish) with Received and Intake empty; the worker that
// accepts it records it as the body of [ApprovalGranted] or
// [ApprovalDenied] (whichever Decision says), with Received and Intake
// filled in. Those two are the worker's, not signed.
type DecisionBody struct {
	Approval  string    `json:"approval"`
	Hash      string    `json:"hash"`
	Decision  string    `json:"decision"`
	Operator  string    `json:"operator"`
	Reason    string    `json:"reason,omitempty"`
	Signed    time.Time `json:"signed"`
	Signature string    `json:"signature"`
	// Received is when the worker that recorded the decision read it from
	// the decisions stream, by that worker's clock (the clock approvals
	// expire by). Expiry and the signing time are judged against it.
	Received time.Time `json:"received,omitzero"`
	// Intake is the decision's sequence in the decisions stream.
	Intake uint64 `json:"intake,omitempty"`
}

// Kind is the event kind that records d: [ApprovalGranted] for a grant,
// [ApprovalDenied] for a denial, "" for anything else.
func (d DecisionBody) Kind() Kind {
	switch d.Decision {
	case DecisionGrant:
		return ApprovalGranted
	case DecisionDeny:
		return ApprovalDenied
	}
	return ""
}

// ExpiredBody is the body of [ApprovalExpired].
type ExpiredBody struct {
	Approval string `json:"approval"`
}

// RefusedBody is the body of [ApprovalRefused].
type RefusedBody struct {
	Approval string `json:"approval"`
	// Event is the id of the recorded decision event that was refused, when
	// a decision already recorded no longer verifies (its key was removed).
	Event string `json:"event,omitempty"`
	// Intake is the sequence in the decisions stream of the published
	// decision that was refused before it was recorded.
	Intake   uint64 `json:"intake,omitempty"`
	Operator string `json:"operator,omitempty"`
	Reason   string `json:"reason"`
}

// EndReason says why a run ended, as [EndBody] records it.
type EndReason string

// End reasons.
const (
	ReasonCompleted     EndReason = "completed"
	ReasonPolicyAbort   EndReason = "policy_abort"
	ReasonInternalError EndReason = "internal_error"
	// ReasonTooLarge ends a run one of whose events the server cannot
	// store (a policy's approval JSON too large, say): it fails closed,
	// with the size recorded, instead of waiting on an append that can
	// never be made.
	ReasonTooLarge         EndReason = "event_too_large"
	ReasonRepeatedFailures EndReason = "repeated_tool_failures"
	ReasonStepLimit        EndReason = "step_limit"
	ReasonLoopDetected     EndReason = "loop_detected"
	ReasonTimeLimit        EndReason = "time_limit"
	ReasonApprovalDenied   EndReason = "approval_denied"
	ReasonApprovalExpired  EndReason = "approval_expired"
	ReasonCancelled        EndReason = "cancelled"
	ReasonAgentError       EndReason = "agent_error"
	ReasonBudgetExceeded   EndReason = "budget_exceeded"
	// ReasonNoAgent ends a run whose agent no worker of the fleet offers.
	ReasonNoAgent EndReason = "no_agent"
)

// EndBody is the body of [RunFinished], [RunFailed] and [RunCancelled].
type EndBody struct {
	Reason EndReason `json:"reason"`
	Detail string    `json:"detail,omitempty"`
	// Result is the terminal tool's result, or the agent's final answer,
	// for a finished run.
	Result string `json:"result,omitempty"`
	// Policy is the evaluation that failed the run, for a run failed as
	// internal_error by its policy: outcome [OutcomeError], the reason, and
	// the request as the policy was handed it, so replay can re-check it.
	Policy *PolicyBody `json:"policy,omitempty"`
	// Observation is the terminal tool's result that completed the run,
	// for a [RunFinished] that records it instead of a [StepObserved]
	// before it: one durable append fewer per run (ADR 0017). It is the
	// last step's, of kind [ObsResult], and Result is its Content.
	Observation *ObservedBody `json:"observation,omitempty"`
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
const SideEffectNone SideEffect = "none"

// ModelAttemptBody is the body of [ModelAttempted]. Call numbers a run's
// model calls from 1 (a call is answered by one reply); Attempt numbers
// the attempts of one call from 1.
type ModelAttemptBody struct {
	Call       int        `json:"call"`
	Attempt    int        `json:"attempt"`
	Provider   string     `json:"provider"`
	Model      string     `json:"model"`
	Reserve    ModelUsage `json:"reserve"`
	SideEffect SideEffect `json:"side_effect"`
	// Limit is the budget the attempt was checked against (the agent's
	// configured budget plus the raises granted so far, this attempt's
	// included); zero: no budget.
	Limit ModelUsage `json:"limit,omitzero"`
	// Grant names the granted budget approval ([ApprovalBudget]) whose
	// raise this attempt is the first to use: recording the attempt
	// consumes the grant.
	Grant string `json:"grant,omitempty"`
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

// Observed returns the observation e records, if it records one: the body
// of a [StepObserved] event, or the terminal tool's result a [RunFinished]
// event carries (EndBody.Observation). ok is false for every other event,
// and for an end recorded without an observation. A body that does not
// decode is an error.
func Observed(e Event) (b ObservedBody, ok bool, err error) {
	switch e.Kind {
	case StepObserved:
		b, err = DecodeBody[ObservedBody](e)
		return b, err == nil, err
	case RunFinished:
		end, err := DecodeBody[EndBody](e)
		if err != nil || end.Observation == nil {
			return ObservedBody{}, false, err
		}
		return *end.Observation, true, nil
	}
	return ObservedBody{}, false, nil
}

// PolicyResult returns the policy result e records, if it records one: the
// body of a [StepPolicy] or [ApprovalRequested] event, or the result a
// [StepDecided] event carries (StepDecidedBody.Policy). ok is false for
// every other event, and for a decision recorded without its result. A
// body that does not decode is an error.
func PolicyResult(e Event) (b PolicyBody, ok bool, err error) {
	switch e.Kind {
	case StepPolicy, ApprovalRequested:
		b, err = DecodeBody[PolicyBody](e)
		return b, err == nil, err
	case StepDecided:
		d, err := DecodeBody[StepDecidedBody](e)
		if err != nil || d.Policy == nil {
			return PolicyBody{}, false, err
		}
		return *d.Policy, true, nil
	}
	return PolicyBody{}, false, nil
}
