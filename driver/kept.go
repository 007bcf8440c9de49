package driver

import (
	"context"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
)

// An observation kept is what became of the last step's call when no
// observation of it is stored. The driver keeps one itself when the
// observation's append fails other than on a conflict (the server away):
// the process that ran the call holds its result, and the next drive of
// the same Run records it, rather than recover the call as interrupted and
// ask an operator whether a call whose result it had took effect. A holder
// that knows what became of a call keeps one with [Run.Keep] (a gate whose
// allow could not be confirmed, and which therefore never ran the call).
// Either is recorded only while the run is at the tail it was kept at:
// anything stored since (the observation itself, its ack lost; another
// process's recovery) drops it, and the append that records it is fenced
// on that tail.

// Keep has r remember that step n's call came to kind and content though
// no observation of it is stored: the next drive at r's tail as it is now
// records it as the step's observation, and so does [Driver.Deliver],
// instead of recovering the call as interrupted (or judging a decision
// its holder no longer asks). Only the last step, with no observation,
// allowed or decided and not yet judged, can be kept, on a run that
// runs; Keep reports whether it was.
func (r *Run) Keep(n int, kind events.ObservationKind, content string) bool {
	if !r.keepable(n) {
		return false
	}
	r.kept, r.hasKept, r.keptAt = events.ObservedBody{Step: n, Kind: kind, Content: content}, true, r.tail
	return true
}

// keepable reports whether step n's call may be given a kept observation:
// it is the last step, with no observation, allowed (its call in flight
// or interrupted) or decided and not yet judged, on a run that runs.
func (r *Run) keepable(n int) bool {
	v := &r.view
	last, ok := v.Summary(v.Steps.Len())
	if !ok || last.N != n || last.Observation != "" || v.Run.Status.Ended() || v.PendingApproval() != nil {
		return false
	}
	return last.Executing || v.Step(n).Policy == nil
}

// Kept reports the step whose observation r keeps to record (see
// [Run.Keep]), if r is still at the tail it was kept at.
func (r *Run) Kept() (n int, ok bool) {
	if !r.hasKept || r.keptAt != r.tail {
		return 0, false
	}
	return r.kept.Step, true
}

// keepIfLost keeps o when err, its append's, leaves its storage unknown
// or undone for a reason that may pass (not a conflict: another writer
// moved the run on; not a size the server never takes).
func (r *Run) keepIfLost(err error, o events.ObservedBody) {
	if err != nil && !errors.Is(err, events.ErrConflict) && !errors.Is(err, events.ErrTooLarge) {
		r.kept, r.hasKept, r.keptAt = o, true, r.tail
	}
}

// Deliver records the observation r keeps (see [Run.Keep]), if r is still
// at the tail it was kept at. On an error other than a conflict it is kept
// still.
func (d *Driver) Deliver(ctx context.Context, r *Run) error {
	if _, ok := r.Kept(); !ok {
		r.hasKept = false
		return nil
	}
	if err := d.deliver(ctx, r); err != nil {
		return fmt.Errorf("record the kept observation of step %d on run %s: %w", r.kept.Step, r.ID(), err)
	}
	return nil
}

// deliver appends r's kept observation, which is at r's tail.
func (d *Driver) deliver(ctx context.Context, r *Run) error {
	o := d.observation(r.kept.Step, r.kept.Kind, r.kept.Content)
	err := d.append(ctx, r, r.ID(), events.StepObserved, o)
	if err == nil || errors.Is(err, events.ErrConflict) {
		r.hasKept = false
	}
	return err
}

// Reload reads r's run again from the log, as [Driver.Load] does, for a
// holder whose drive failed: what r kept to send again (a decision) is
// not carried over, since the holder may not want it any more, but an
// observation it keeps is, if nothing was stored since it was kept.
func (d *Driver) Reload(ctx context.Context, r *Run) (*Run, error) {
	fresh, err := d.Load(ctx, r.ID())
	if err != nil {
		return nil, err
	}
	if _, ok := r.Kept(); ok && fresh.tail == r.keptAt {
		fresh.kept, fresh.hasKept, fresh.keptAt = r.kept, true, fresh.tail
	}
	switch {
	case r.lostCall > 0 && fresh.tail.Count == r.lost.Count && fresh.tail.Hash == r.lost.Hash:
		fresh.lateCall, fresh.lateAt = r.lostCall, fresh.tail // stored late
	case r.mineCall > 0 && fresh.tail == r.tail:
		fresh.lateCall, fresh.lateAt = r.mineCall, fresh.tail // stored, and what followed was not
	}
	return fresh, nil
}

// OwnCallLast is, of a Run [Driver.Reload] read, the step whose call the
// run's last event decides or allows (a decision, an allow, a grant's
// use, the rerun of an interrupted read) when that event is the Run's it
// was read again for, and nothing was stored after it: the event whose
// append failed last, stored all the same (its acknowledgement lost), or
// the last one it stored, when what it appended next was not. It is 0
// otherwise: when that event was of no call (a tool list, an approval's
// request), or the run ends with another's. The events' own bytes say
// which it is (count and hash), not a kind or a step: the same call
// decided by another process is another event.
func (r *Run) OwnCallLast() int {
	if r.tail != r.lateAt {
		return 0
	}
	return r.lateCall
}

// callOf is the step whose call an event of kind k with body decides or
// allows, or 0.
func callOf(k events.Kind, body any) int {
	switch b := body.(type) {
	case events.StepDecidedBody:
		if k == events.StepDecided {
			return b.Step
		}
	case events.PolicyBody:
		if k == events.StepPolicy && (b.Outcome == events.Allow || b.Consumes != "") {
			return b.Step
		}
	case events.InterruptedBody:
		if k == events.StepInterrupted && b.Resolution == events.ResolvedRerun {
			return b.Step
		}
	}
	return 0
}
