// Package projector owns the run view: the fold of a run's events into its
// current state (the run row, every step, every approval). The fold is pure:
// it reads nothing but the events it is handed, so every worker, the replay
// audit and the operator command derive the same view from the same events.
//
// It must not decide anything (that is the policy's job), touch the network,
// or read a clock.
package projector

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/arbiter-run/arbiter/events"
)

// Status is a run's state.
type Status string

// The statuses a run can be in.
const (
	Running   Status = "RUNNING"
	Waiting   Status = "WAITING_FOR_APPROVAL"
	Completed Status = "COMPLETED"
	Failed    Status = "FAILED"
	Cancelled Status = "CANCELLED"
)

// Ended reports whether s is terminal.
func (s Status) Ended() bool { return s == Completed || s == Failed || s == Cancelled }

// ApprovalState is where an approval stands.
type ApprovalState string

// The states of an approval. Granted and Denied mean a decision event was
// recorded; a worker verifies its signature before acting, and records a
// refusal (which returns the approval to Pending) when it does not verify.
const (
	Pending  ApprovalState = "pending"
	Granted  ApprovalState = "granted"
	Denied   ApprovalState = "denied"
	Expired  ApprovalState = "expired"
	Consumed ApprovalState = "consumed"
	// Superseded is an approval whose step was evaluated again without
	// consuming it: it can never be used after that.
	Superseded ApprovalState = "superseded"
)

// Run is the run row.
type Run struct {
	ID     string
	Status Status
	// Reason is why the run ended, or the kind of approval it waits for.
	Reason string
	Detail string
	// Result is the terminal tool's result for a completed run.
	Result string
	Agent  string
	// Actor is who asked for the run (nil: nobody named); Surface where the
	// request came from.
	Actor   *events.Actor   `json:",omitempty"`
	Surface string          `json:",omitempty"`
	Input   json.RawMessage `json:",omitempty"`
	Tools   []events.ToolSpec
	// Withheld are the tools the runtime knew of and refused to offer, as
	// last recorded (run.created or run.tools).
	Withheld []events.WithheldTool `json:",omitempty"`
	Limits   events.Limits
	// Steps counts the steps decided.
	Steps int
	// FailuresInRow counts failed steps since the last success.
	FailuresInRow int
	// Repeats counts how many steps in a row made the same request with the
	// same result (loop detection); Fingerprint identifies that request and
	// result.
	Repeats     int
	Fingerprint uint64
	Created     time.Time
	Updated     time.Time
	// Events is the number of events folded.
	Events uint64
}

// Step is one decision of the agent and what came of it.
type Step struct {
	N        int
	Decision events.StepDecidedBody
	Decided  time.Time
	// Policy is the latest policy result for the step (nil before the
	// policy has been asked, or after a reconciliation said the call never
	// happened).
	Policy *events.PolicyBody
	// Evaluations counts the policy results recorded for the step.
	Evaluations int
	Observation *events.ObservedBody
	Interrupted *events.InterruptedBody
}

// Executing reports whether the step was allowed and has no observation: its
// call is in flight, or was interrupted if nobody is driving it.
//
// A result that consumes a granted approval executes too, whatever its
// outcome (a require_approval whose hash matched the grant).
func (s Step) Executing() bool {
	return s.Policy != nil && (s.Policy.Outcome == events.Allow || s.Policy.Consumes != "") && s.Observation == nil
}

// Approval is an approval a step asked for, and where it stands.
type Approval struct {
	events.ApprovalRequest
	Step int
	// Tool and Args are the request the approval is for: the tool's name
	// and the arguments in PolicyJSON form, as the approval hash binds them.
	Tool      string
	Args      json.RawMessage
	Origin    string
	State     ApprovalState
	Requested time.Time
	// Decision is the recorded decision, with DecisionEvent its event id.
	Decision      *events.DecisionBody
	DecisionEvent string
	// Raise is what a grant of a budget approval adds to the run's model
	// budget (Step is 0 then: the approval is of no step).
	Raise events.ModelUsage `json:",omitzero"`
}

// View is a run as its events say it is.
//
// A view survives encoding/json unchanged (a worker's snapshot), provided
// the encoder does not escape HTML (json.Encoder.SetEscapeHTML(false)):
// json.Marshal escapes the PolicyJSON a view holds, so it no longer reads
// back byte for byte (TestView_JSONRoundTripIsExact).
type View struct {
	Run       Run
	Steps     Steps
	Approvals []Approval
	// Refusals is every refusal recorded, in order.
	Refusals []events.RefusedBody
	// Intake is the sequence in the decisions stream of the last published
	// decision the run recorded (accepted or refused): a worker reads the
	// decisions after it.
	Intake uint64
	// Model is what the run's model calls came to.
	Model ModelCalls
}

// Step returns a copy of step n (1-based), or nil.
func (v *View) Step(n int) *Step {
	if n < 1 || n > v.Steps.Len() {
		return nil
	}
	s := v.Steps.At(n - 1)
	return &s
}

// StepSummary is what a step's record says of where it stands, as plain
// values: reading it copies nothing of the step (see [View.Summary]).
type StepSummary struct {
	N    int
	Tool string // the decision's tool
	// Observation is the kind of the step's observation, "" when it has
	// none.
	Observation events.ObservationKind
	Executing   bool // see [Step.Executing]
}

// Summary returns step n's summary (1-based), and false if there is no
// step n. It is [View.Step] for a reader that needs only these fields, at
// no copy of the step.
func (v *View) Summary(n int) (StepSummary, bool) {
	if n < 1 || n > v.Steps.Len() {
		return StepSummary{}, false
	}
	s := v.Steps.ref(n - 1)
	sum := StepSummary{N: s.N, Tool: s.Decision.Tool, Executing: s.Executing()}
	if s.Observation != nil {
		sum.Observation = s.Observation.Kind
	}
	return sum, true
}

// Observation returns a copy of step n's observation (1-based), nil when
// there is no step n or it has none: [View.Step]'s Observation, without
// copying the rest.
func (v *View) Observation(n int) *events.ObservedBody {
	if n < 1 || n > v.Steps.Len() {
		return nil
	}
	o := v.Steps.ref(n - 1).Observation
	if o == nil {
		return nil
	}
	c := *o
	return &c
}

// Decision returns a copy of step n's decision (1-based), and false if
// there is no step n: [View.Step]'s Decision, without copying the rest.
func (v *View) Decision(n int) (events.StepDecidedBody, bool) {
	if n < 1 || n > v.Steps.Len() {
		return events.StepDecidedBody{}, false
	}
	d := v.Steps.ref(n - 1).Decision
	d.ArgsBytes = cloneSlice(d.ArgsBytes)
	if d.Oversize != nil {
		o := *d.Oversize
		d.Oversize = &o
	}
	if d.Policy != nil {
		p := clonePolicy(*d.Policy)
		d.Policy = &p
	}
	return d, true
}

// stepRef returns step n for the fold to change, or nil.
func (v *View) stepRef(n int) *Step {
	if n < 1 || n > v.Steps.Len() {
		return nil
	}
	return v.Steps.mut(n - 1)
}

// Approval returns the approval with id, or nil.
func (v *View) Approval(id string) *Approval {
	for i := range v.Approvals {
		if v.Approvals[i].ID == id {
			return &v.Approvals[i]
		}
	}
	return nil
}

// PendingApproval returns the approval the run waits on (the latest approval
// still pending or decided but not acted on), or nil.
func (v *View) PendingApproval() *Approval {
	for i := len(v.Approvals) - 1; i >= 0; i-- {
		switch v.Approvals[i].State {
		case Pending, Granted, Denied:
			return &v.Approvals[i]
		}
	}
	return nil
}

// Clone returns a copy of v that shares nothing anyone can change: changing
// the copy changes nothing in v. It costs the same whatever the run's length
// (see [Steps]).
func (v View) Clone() View {
	c := View{Run: v.Run, Intake: v.Intake}
	c.Run.Input = cloneRaw(v.Run.Input)
	c.Run.Actor = v.Run.Actor.Clone()
	c.Run.Tools = cloneTools(v.Run.Tools)
	c.Run.Withheld = cloneSlice(v.Run.Withheld)
	c.Steps = v.Steps.clone()
	if v.Approvals != nil {
		c.Approvals = make([]Approval, len(v.Approvals))
		for i, a := range v.Approvals {
			c.Approvals[i] = a.clone()
		}
	}
	c.Refusals = cloneSlice(v.Refusals)
	c.Model = v.Model.clone()
	return c
}

// Fork returns a copy of v to fold into while v stays as it is: what the
// fold changes in place (the approvals) is copied, everything else is
// shared. Unlike [View.Clone] it does not protect v from a holder who
// writes into the copy's slices; it is for a writer that folds an event it
// is still appending, and keeps the fork only once the append is made.
func (v View) Fork() View {
	if v.Approvals != nil {
		v.Approvals = slices.Clone(v.Approvals)
	}
	return v
}

// Lookahead returns a copy of v to fold into and throw away, as [View.Fork]
// does, for a writer that folds an event only to look at the result (the
// decision a policy is shown before the decision is appended). Its folds
// leave the room after v's steps to v and its forks: the fork that is kept
// then takes that room in place, where after a plain Fork thrown away it
// would copy the steps it shares.
func (v View) Lookahead() View {
	f := v.Fork()
	f.Steps = f.Steps.lookaheadCopy()
	return f
}

func (s Step) clone() Step {
	c := s
	c.Decision.ArgsBytes = cloneSlice(s.Decision.ArgsBytes)
	if s.Policy != nil {
		p := clonePolicy(*s.Policy)
		c.Policy = &p
	}
	if s.Observation != nil {
		o := *s.Observation
		c.Observation = &o
	}
	if s.Interrupted != nil {
		in := *s.Interrupted
		if in.Observation != nil {
			o := *in.Observation
			in.Observation = &o
		}
		c.Interrupted = &in
	}
	return c
}

func (a Approval) clone() Approval {
	c := a
	c.ApprovalRequest = cloneRequest(a.ApprovalRequest)
	c.Args = cloneRaw(a.Args)
	if a.Decision != nil {
		d := *a.Decision
		c.Decision = &d
	}
	return c
}

func clonePolicy(p events.PolicyBody) events.PolicyBody {
	p.Args = cloneRaw(p.Args)
	p.Parts = cloneSlice(p.Parts)
	if p.Shadow != nil {
		sh := *p.Shadow
		sh.Parts = cloneSlice(sh.Parts)
		p.Shadow = &sh
	}
	if p.Approval != nil {
		r := cloneRequest(*p.Approval)
		p.Approval = &r
	}
	return p
}

func cloneRequest(r events.ApprovalRequest) events.ApprovalRequest {
	r.Capability = cloneRaw(r.Capability)
	r.Presentation = cloneRaw(r.Presentation)
	if r.ExpiresAt != nil {
		t := *r.ExpiresAt
		r.ExpiresAt = &t
	}
	return r
}

func cloneTools(ts []events.ToolSpec) []events.ToolSpec {
	if ts == nil {
		return nil
	}
	// Every schema's bytes in one allocation and every name list in
	// another: a view is copied for the agent and the policy every step.
	var nb, ns int
	for _, t := range ts {
		nb += len(t.Schema)
		ns += len(t.Data) + len(t.Tags)
	}
	bytes, names := make([]byte, 0, nb), make([]string, 0, ns)
	out := make([]events.ToolSpec, len(ts))
	for i, t := range ts {
		t.Schema = carve(&bytes, t.Schema)
		t.Data = carve(&names, t.Data)
		t.Tags = carve(&names, t.Tags)
		out[i] = t
	}
	return out
}

func cloneRaw(b json.RawMessage) json.RawMessage { return cloneSlice(b) }

// carve copies s to the end of arena (whose capacity the caller sized) and
// returns the copy, capped so that appending to it cannot reach what is
// carved after it; nil stays nil and empty empty, as cloneSlice keeps them.
func carve[S ~[]E, E any](arena *[]E, s S) S {
	if s == nil {
		return nil
	}
	*arena = append(*arena, s...)
	n := len(*arena)
	return S((*arena)[n-len(s) : n : n])
}

// cloneSlice copies s, keeping nil nil and empty empty, so a clone is
// reflect.DeepEqual to its original.
func cloneSlice[S ~[]E, E any](s S) S {
	if s == nil {
		return nil
	}
	c := make(S, len(s))
	copy(c, s)
	return c
}
