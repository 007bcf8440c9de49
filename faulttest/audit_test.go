package faulttest

import (
	"context"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// audit is what the log and the ledger say about a set of runs once nobody
// drives them any more.
type audit struct {
	runs, completed, waiting int
	// executions are ledger lines; reexecutions those beyond the first of
	// a step (each backed by a recorded rerun_read_only).
	executions, reexecutions int
	// reruns are rerun_read_only resolutions; interrupted are the
	// interrupted_side_effect approvals raised.
	reruns, interrupted int
	// allowedNotRun are allowed steps the ledger never saw execute (the
	// worker died between the allow and the tool).
	allowedNotRun int
}

func (a *audit) add(b audit) {
	a.runs += b.runs
	a.completed += b.completed
	a.waiting += b.waiting
	a.executions += b.executions
	a.reexecutions += b.reexecutions
	a.reruns += b.reruns
	a.interrupted += b.interrupted
	a.allowedNotRun += b.allowedNotRun
}

func (a audit) String() string {
	return fmt.Sprintf("%d runs (%d completed, %d waiting on an interrupted call), %d executions (%d re-executions of read-only calls), %d rerun_read_only, %d interrupted_side_effect approvals, %d allowed steps never executed",
		a.runs, a.completed, a.waiting, a.executions, a.reexecutions, a.reruns, a.interrupted, a.allowedNotRun)
}

// stepFacts is what a run's events say about one step.
type stepFacts struct {
	tool  string
	class events.SideEffect
	args  string // as the policy was handed them (PolicyJSON)
	// allows counts write-ahead results: step.policy allow, or one that
	// consumes a grant.
	allows int
	reruns int
	// approvals counts interrupted_side_effect approvals raised for it.
	approvals int
	observed  bool
}

type callKey struct {
	run  string
	step int
}

// auditRuns checks runs against the log and the ledger of sandbox:
//
//   - (a) every run ended COMPLETED, or waits on an interrupted_side_effect
//     approval (and its chain of events is unbroken);
//   - (b) every execution the ledger holds has a durable allow for its run
//     and step in the log, for that tool and those arguments;
//   - (c) a step executed more than once is a read-only call with a
//     rerun_read_only recorded for every execution beyond the first; a
//     side effect executed at most once and was allowed at most once;
//   - (d) every side-effect step allowed and never observed ends as exactly
//     one interrupted_side_effect approval, the one its run waits on, and no
//     other step has one.
//
// It returns every violation found, joined.
func auditRuns(ctx context.Context, l *events.Log, sandbox string, runs []string) (audit, error) {
	var a audit
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	steps := map[callKey]*stepFacts{}
	for _, id := range runs {
		recs, _, err := l.Read(ctx, id)
		if err != nil {
			bad("read run %s: %w", id, err)
			continue
		}
		v, err := fold(recs)
		if err != nil {
			bad("fold run %s: %w", id, err)
			continue
		}
		a.runs++
		facts, err := runFacts(id, v, recs)
		if err != nil {
			bad("%w", err)
			continue
		}
		for k, f := range facts {
			steps[k] = f
		}
		switch p := v.PendingApproval(); {
		case v.Run.Status == projector.Completed:
			a.completed++
		case v.Run.Status == projector.Waiting && p != nil && p.Kind == driver.InterruptedSideEffect:
			a.waiting++
		default:
			bad("(a) run %s: status %s (%s %s), want COMPLETED or waiting on an %s approval", id, v.Run.Status, v.Run.Reason, v.Run.Detail, driver.InterruptedSideEffect)
		}
		for n := range v.Steps.Len() {
			f := facts[callKey{id, n + 1}]
			a.reruns += f.reruns
			a.interrupted += f.approvals
			open := f.class != events.ReadOnly && f.allows > 0 && !f.observed
			switch {
			case open && f.approvals != 1:
				bad("(d) run %s step %d (%s): allowed, never observed, with %d %s approvals, want 1", id, n+1, f.tool, f.approvals, driver.InterruptedSideEffect)
			case open && (v.PendingApproval() == nil || v.PendingApproval().Step != n+1):
				bad("(d) run %s step %d (%s): allowed and never observed, but the run does not wait on its approval", id, n+1, f.tool)
			case !open && f.approvals != 0:
				bad("(d) run %s step %d (%s): %d %s approvals for a step that was not an unresolved side effect", id, n+1, f.tool, f.approvals, driver.InterruptedSideEffect)
			}
			if f.class != events.ReadOnly && f.allows > 1 {
				bad("(c) run %s step %d (%s, %s): %d write-ahead allows, want at most 1 without a grant", id, n+1, f.tool, f.class, f.allows)
			}
		}
	}
	ledger, err := readLedger(sandbox)
	if err != nil {
		return a, errors.Join(append(errs, err)...)
	}
	known := map[string]bool{}
	for _, id := range runs {
		known[id] = true
	}
	count := map[callKey]int{}
	for _, e := range ledger {
		k := callKey{e.Run, e.Step}
		a.executions++
		count[k]++
		f := steps[k]
		switch {
		case !known[e.Run]:
			bad("(b) ledger: %s executed for run %q step %d, which is not a run of this test", e.Tool, e.Run, e.Step)
		case f == nil:
			bad("(b) ledger: %s executed for run %s step %d, which the run never decided", e.Tool, e.Run, e.Step)
		case f.allows == 0:
			bad("(b) ledger: %s executed for run %s step %d with no allow recorded for the step", e.Tool, e.Run, e.Step)
		case f.tool != e.Tool || f.args != e.Args:
			bad("(b) ledger: run %s step %d executed %s %s, but the allow was for %s %s", e.Run, e.Step, e.Tool, e.Args, f.tool, f.args)
		}
	}
	for k, f := range steps {
		n := count[k]
		if n > 1 {
			a.reexecutions += n - 1
		}
		if f.allows > 0 && n == 0 {
			a.allowedNotRun++
		}
		switch {
		case n > 1 && f.class != events.ReadOnly:
			bad("(c) run %s step %d: %s (%s) executed %d times, want at most 1", k.run, k.step, f.tool, f.class, n)
		case n > 1 && f.reruns < n-1:
			bad("(c) run %s step %d: read-only %s executed %d times with %d rerun_read_only recorded, want at least %d", k.run, k.step, f.tool, n, f.reruns, n-1)
		case n > f.allows+f.reruns:
			bad("(b) run %s step %d: %s executed %d times against %d allows and %d reruns", k.run, k.step, f.tool, n, f.allows, f.reruns)
		}
	}
	return a, errors.Join(errs...)
}

func fold(recs []events.Record) (projector.View, error) {
	evs := make([]events.Event, len(recs))
	for i, r := range recs {
		evs[i] = r.Event
	}
	return projector.Fold(evs...)
}

// runFacts reads, from a run's events, what happened to each of its steps.
func runFacts(run string, v projector.View, recs []events.Record) (map[callKey]*stepFacts, error) {
	classes := map[string]events.SideEffect{}
	for _, t := range v.Run.Tools {
		classes[t.Name] = t.SideEffect
	}
	out := map[callKey]*stepFacts{}
	for s := range v.Steps.All() {
		out[callKey{run, s.N}] = &stepFacts{tool: s.Decision.Tool, class: classes[s.Decision.Tool], observed: s.Observation != nil}
	}
	for _, r := range recs {
		b, isResult, err := events.PolicyResult(r.Event)
		if err != nil {
			return nil, err
		}
		switch {
		case isResult:
			f := out[callKey{run, b.Step}]
			if f == nil {
				return nil, fmt.Errorf("run %s: policy result for step %d, which has no decision", run, b.Step)
			}
			if b.Outcome == events.Allow || b.Consumes != "" {
				f.allows++
				f.args = string(b.Args)
			}
			if b.Approval != nil && b.Approval.Kind == driver.InterruptedSideEffect {
				f.approvals++
			}
		case r.Event.Kind == events.StepInterrupted:
			b, err := events.DecodeBody[events.InterruptedBody](r.Event)
			if err != nil {
				return nil, err
			}
			if f := out[callKey{run, b.Step}]; f != nil && b.Resolution == events.ResolvedRerun {
				f.reruns++
			}
		}
	}
	return out, nil
}
