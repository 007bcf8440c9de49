package replay

import (
	"context"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/policy"
)

// A policy may hide a tool from the agent (the discovery phase,
// [policy.Discoverer]); a request for a hidden tool is refused like one
// for a tool that does not exist, as a step.observed unknown_tool, with no
// policy result. Such a refusal is still the policy's decision, and a
// changed policy may show the tool: replay re-checks it as an evaluation
// whose recorded outcome is a deny.

// hiddenReason is the recorded reason of a hidden tool's refusal.
const hiddenReason = "hidden from the agent (discovery phase)"

// observed handles step.observed: when it refuses a request for a tool
// the run records and does not withhold, the run's policy hid that tool,
// and the refusal is re-checked. Then e is folded.
func (c *checker) observed(ctx context.Context, st *runState, e events.Event, seq uint64, report bool) error {
	var res *Result
	if b, err := events.DecodeBody[events.ObservedBody](e); err == nil && b.Kind == events.ObsUnknownTool && report && c.inSelection(seq, e) {
		res = c.hidden(ctx, st, e, seq, b.Step)
	}
	if c.fold(st, e, seq); st.broken != "" {
		return nil
	}
	if res != nil {
		st.pending = res
	}
	return nil
}

// hidden builds the result of a hidden tool's refusal at step n, or nil
// when the step's tool is not one the run records (a tool that does not
// exist, or one withheld by the runtime: no policy decided those).
func (c *checker) hidden(ctx context.Context, st *runState, e events.Event, seq uint64, n int) *Result {
	s := st.view.Step(n)
	if s == nil || s.Policy != nil || s.Decision.Oversize != nil {
		return nil
	}
	var spec events.ToolSpec
	found := false
	for _, t := range st.view.Run.Tools {
		if t.Name == s.Decision.Tool {
			spec, found = t, true
		}
	}
	for _, w := range st.view.Run.Withheld {
		if w.Name == s.Decision.Tool {
			found = false
		}
	}
	if !found || (c.tool != "" && spec.Name != c.tool) {
		return nil
	}
	res := &Result{
		Run: e.Run, Step: n, StreamSeq: seq, Event: e.ID, Kind: e.Kind, Time: e.Time, Tool: spec.Name, PolicyID: st.policyID,
		Recorded: Ruling{Outcome: events.Deny, Reason: hiddenReason},
	}
	args, argsErr := jsonform.PolicyJSON(s.Decision.RawArgs())
	switch {
	case st.policyID == "":
		notCheckable(res, NoRecordedID, "a tool hidden before the run recorded any evaluation: nothing says which policy hid it")
	case c.against == "":
		notCheckable(res, NoCheckingID, "checking policy has no id (name it, or name the recorded one as the baseline)")
	case st.policyID != c.against:
		notCheckable(res, OtherPolicy, fmt.Sprintf("hidden under policy id %q, checking %q", st.policyID, c.against))
	case st.bad[spec.Hash] || st.specs[spec.Hash].Hash == "":
		notCheckable(res, SpecNotRecorded, fmt.Sprintf("tool spec %s not recorded with content that hashes to it", short(spec.Hash)))
	case !policy.Visible(c.policy, spec, st.view.Clone()):
		rep := Ruling{Outcome: events.Deny, Reason: hiddenReason}
		res.Replayed = &rep
		res.Verdict = Same
	case argsErr != nil:
		// The driver would have refused the request before asking the
		// policy, had the tool been shown.
		notCheckable(res, SpecNotRecorded, fmt.Sprintf("now shown, but the request's arguments are not boundary-clean JSON (%v)", argsErr))
	default:
		req := policy.Request{Run: e.Run, Step: n, Tool: spec, Args: args}
		rep := c.replay(ctx, req, st.view)
		res.Replayed = &rep
		res.Verdict, res.Change = compare(res.Recorded, rep, "")
	}
	return res
}
