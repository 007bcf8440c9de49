package replay

import (
	"context"
	"fmt"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// evaluation re-checks one recorded policy result (step.policy or
// approval.requested). The view the policy saw is st's view as it stands
// before e is folded: the driver hands the policy a copy of its view, which
// is the fold of every event of the run before the one recording the answer
// (its append is fenced on that tail).
func (c *checker) evaluation(ctx context.Context, st *runState, e events.Event, seq uint64, report bool) error {
	b, err := events.DecodeBody[events.PolicyBody](e)
	if err != nil {
		c.fold(st, e, seq) // does not fold either: the run breaks there
		return nil
	}
	return c.evaluated(ctx, st, e, seq, report, b)
}

// decided handles step.decided: a decision that carries its policy result
// (ADR 0017) is re-checked like a step.policy event, against the view that
// holds the decision but not yet the result, which is what the policy was
// shown when it was asked.
func (c *checker) decided(ctx context.Context, st *runState, e events.Event, seq uint64, report bool) error {
	d, err := events.DecodeBody[events.StepDecidedBody](e)
	if err != nil || d.Policy == nil {
		c.fold(st, e, seq)
		return nil
	}
	pb := *d.Policy
	d.Policy = nil
	st.policyID = pb.PolicyID
	shown := st.view.Lookahead()
	if shown.ApplyWith(e, d) != nil {
		c.fold(st, e, seq) // does not fold: the run breaks there
		return nil
	}
	held := st.view
	st.view = shown
	spec, known := st.specs[pb.ToolHash]
	tool := spec.Name
	if !known {
		tool = d.Tool
	}
	var res *Result
	if report && c.inSelection(seq, e) && (c.tool == "" || tool == c.tool) {
		res = c.recheck(ctx, st, e, seq, pb, tool, spec, known)
	}
	st.view = held
	if c.fold(st, e, seq); st.broken != "" {
		return nil // reported not checkable by the caller
	}
	st.pending = res
	return nil
}

// failedRun handles run.failed: when it records the evaluation that failed
// the run (outcome "error"), that evaluation is re-checked like any other,
// so a policy that would now decide what the old one could not is seen.
func (c *checker) failedRun(ctx context.Context, st *runState, e events.Event, seq uint64, report bool) error {
	b, err := events.DecodeBody[events.EndBody](e)
	if err != nil || b.Policy == nil {
		c.fold(st, e, seq)
		return nil
	}
	return c.evaluated(ctx, st, e, seq, report, *b.Policy)
}

// evaluated reports recorded evaluation b (of event e) and folds e.
func (c *checker) evaluated(ctx context.Context, st *runState, e events.Event, seq uint64, report bool, b events.PolicyBody) error {
	spec, known := st.specs[b.ToolHash]
	tool := spec.Name
	if !known {
		if last, ok := st.view.Steps.Last(); ok {
			tool = last.Decision.Tool
		}
	}
	st.policyID = b.PolicyID
	var res *Result
	if report && c.inSelection(seq, e) && (c.tool == "" || tool == c.tool) {
		res = c.recheck(ctx, st, e, seq, b, tool, spec, known)
	}
	if c.fold(st, e, seq); st.broken != "" {
		return nil // reported not checkable by the caller
	}
	st.pending = res
	return nil
}

// recheck builds the result of recorded evaluation b (of event e, stored at
// seq) against st's view before e is folded.
func (c *checker) recheck(ctx context.Context, st *runState, e events.Event, seq uint64, b events.PolicyBody, tool string, spec events.ToolSpec, known bool) *Result {
	res := &Result{
		Run: e.Run, Step: b.Step, StreamSeq: seq, Event: e.ID, Kind: e.Kind, Time: e.Time, Tool: tool,
		PolicyID: b.PolicyID, Resume: b.Resume, Consumes: b.Consumes,
		Recorded: Ruling{Outcome: b.Outcome, Reason: b.Reason, Approval: recordedApproval(b.Approval)},
	}
	var grantHash string
	if b.Consumes != "" {
		if a := st.view.Approval(b.Consumes); a != nil {
			grantHash = a.Hash
			if b.Outcome == events.RequireApproval {
				res.Recorded.Approval = recordedApproval(&a.ApprovalRequest)
			}
		}
		if why, bad := st.invalid[b.Consumes]; bad {
			res.GrantProblem = why
		}
	}
	switch {
	case b.Origin == events.OriginRecovery:
		notCheckable(res, Recovery, "raised by the runtime (recovery) for an interrupted call, not by a policy")
	case b.PolicyID == "":
		notCheckable(res, NoRecordedID, "recorded by a policy with no id")
	case c.against == "":
		notCheckable(res, NoCheckingID, "checking policy has no id (name it, or name the recorded one as the baseline)")
	case b.PolicyID != c.against:
		notCheckable(res, OtherPolicy, fmt.Sprintf("recorded by policy id %q, checking %q", b.PolicyID, c.against))
	case st.bad[b.ToolHash]:
		notCheckable(res, SpecNotRecorded, fmt.Sprintf("tool spec %s recorded with content that does not hash to it", short(b.ToolHash)))
	case !known:
		notCheckable(res, SpecNotRecorded, fmt.Sprintf("tool spec %s not recorded", short(b.ToolHash)))
	default:
		req := policy.Request{Run: e.Run, Step: b.Step, Tool: spec, Args: b.Args}
		rep := c.replay(policy.WithRecorded(ctx, b), req, st.view)
		res.Replayed = &rep
		res.Verdict, res.Change = compare(res.Recorded, rep, grantHash)
	}
	return res
}

func notCheckable(res *Result, cause Cause, reason string) {
	res.Verdict, res.Change, res.Cause, res.Reason, res.Replayed = NotCheckable, "", cause, reason, nil
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" {
		return `""`
	}
	return h
}

func recordedApproval(a *events.ApprovalRequest) *Approval {
	if a == nil {
		return nil
	}
	return &Approval{Kind: a.Kind, Capability: a.Capability, Presentation: a.Presentation, Hash: a.Hash}
}

// replay asks the policy again, as the runtime does ([policy.Ask]), and
// turns its verdict into what the runtime would record: an approval held
// to PolicyJSON and hashed over the recorded request, or an error for
// anything the runtime would fail the run on.
func (c *checker) replay(ctx context.Context, req policy.Request, view projector.View) Ruling {
	v := policy.Ask(ctx, c.policy, req, view) // Ask hands the policy its own copy
	switch {
	case v.Err != nil:
		return Ruling{Outcome: events.OutcomeError, Reason: v.Err.Error()}
	case v.Approval != nil:
		return Ruling{Outcome: v.Outcome, Reason: v.Reason, Approval: &Approval{
			Kind: v.Approval.Kind, Capability: v.Approval.Capability, Presentation: v.Approval.Presentation, Hash: v.Approval.Hash,
		}}
	}
	return Ruling{Outcome: v.Outcome, Reason: v.Reason}
}

// compare says whether rep decides as rec did and, if not, which way it
// moves. grantHash is the hash of the grant a resume evaluation was given
// (""): a require_approval with exactly that hash runs the call, as an allow
// does.
func compare(rec, rep Ruling, grantHash string) (Verdict, Change) {
	if rec.Outcome == rep.Outcome && rec.Reason == rep.Reason && approvalHash(rec) == approvalHash(rep) {
		return Same, ""
	}
	if rec.Outcome == events.OutcomeError && rep.Outcome == events.OutcomeError {
		// Both fail the run closed; an error's text is not a decision.
		return Same, ""
	}
	a, b := rank(rec, grantHash), rank(rep, grantHash)
	switch {
	case b > a:
		return Different, Widens
	case b < a:
		return Different, Narrows
	}
	return Different, Changed
}

func approvalHash(d Ruling) string {
	if d.Outcome != events.RequireApproval || d.Approval == nil {
		return ""
	}
	return d.Approval.Hash
}

// rank orders outcomes by how much they let through: the call runs (2), runs
// if a person says so (1), does not run (0).
func rank(d Ruling, grantHash string) int {
	switch d.Outcome {
	case events.Allow:
		return 2
	case events.RequireApproval:
		if grantHash != "" && approvalHash(d) == grantHash {
			return 2
		}
		return 1
	}
	return 0
}

// decision verifies a recorded operator decision against the approval it
// names, as the run stood before it, and folds it.
func (c *checker) decision(st *runState, e events.Event, seq uint64, report bool) error {
	d, err := events.DecodeBody[events.DecisionBody](e)
	if err != nil {
		c.fold(st, e, seq) // does not fold either: the run breaks there
		return nil
	}
	a := st.view.Approval(d.Approval)
	g := GrantResult{
		Run: e.Run, StreamSeq: seq, Event: e.ID, Time: e.Time, Approval: d.Approval,
		Decision: d.Decision, Operator: d.Operator,
	}
	if a != nil {
		g.Step = a.Step
		if a.Step >= 1 && a.Step <= st.view.Steps.Len() {
			g.Tool = st.view.Steps.At(a.Step - 1).Decision.Tool
		}
	}
	g.Verdict, g.Reason = c.verify(e.Run, e.Kind, d, a)
	takes := a != nil && a.State == projector.Pending
	if c.fold(st, e, seq); st.broken != "" {
		return nil
	}
	if takes {
		if g.Verdict == GrantInvalid {
			if st.invalid == nil {
				st.invalid = map[string]string{}
			}
			st.invalid[a.ID] = g.Reason
		} else {
			delete(st.invalid, a.ID)
		}
	}
	if !report || !c.inSelection(seq, e) || (c.tool != "" && g.Tool != c.tool) {
		return nil
	}
	return c.emitGrant(g)
}

// verify judges decision d, recorded as an event of kind k, on approval a
// (nil: the run has none by that id), as a worker does before it records
// one ([approvals.Admit]). With no operator keys configured, the signature
// is still checked against the key the decision names, and a decision that
// holds is unverified: nothing says that key is an operator's.
func (c *checker) verify(run string, k events.Kind, d events.DecisionBody, a *projector.Approval) (GrantVerdict, string) {
	switch {
	case a == nil:
		return GrantNotActed, fmt.Sprintf("%v: %s", approvals.ErrNoApproval, d.Approval)
	case d.Kind() != k:
		return GrantInvalid, fmt.Sprintf("%v: %q recorded as %s", approvals.ErrBadDecision, d.Decision, k)
	case a.State != projector.Pending:
		return GrantNotActed, fmt.Sprintf("%v (state %s)", approvals.ErrNotPending, a.State)
	}
	ops := c.opts.Operators
	if len(ops) == 0 {
		ops = approvals.Operators{d.Operator: "unverified"}
	}
	if err := approvals.Admit(ops, run, a, d, approvals.DefaultSkew); err != nil {
		return GrantInvalid, err.Error()
	}
	if len(c.opts.Operators) == 0 {
		return GrantUnverified, "no operator keys to verify the signature with"
	}
	return GrantValid, ""
}

func (c *checker) emitGrant(g GrantResult) error {
	c.sum.Grants++
	switch g.Verdict {
	case GrantValid:
		c.sum.GrantsValid++
	case GrantInvalid:
		c.sum.GrantsInvalid++
	case GrantNotActed:
		c.sum.GrantsNotActed++
	case GrantUnverified:
		c.sum.GrantsUnverified++
	}
	if c.opts.OnGrant == nil {
		return nil
	}
	return c.opts.OnGrant(g)
}
