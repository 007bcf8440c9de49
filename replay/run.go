package replay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/arbiter-run/arbiter/projector"
)

// runState is what a check keeps of one run in flight: its view folded so
// far, the tool specs it recorded, where its hash chain stands, and the
// result waiting for the run's next event to vouch for it.
type runState struct {
	view  projector.View
	specs map[string]events.ToolSpec // by hash, every spec the run recorded whose content hashes to it
	bad   map[string]bool            // hashes recorded with content that does not hash to them
	count uint64                     // events of the run read
	last  string                     // hash of the last one
	// broken is why the run's history cannot be trusted from some event on
	// ("" while it can).
	broken  string
	pending *Result
	// invalid names the approvals whose standing decision did not verify,
	// with why.
	invalid map[string]string
	// policyID is the id the run's last recorded evaluation carries: the
	// policy that hid a tool from it, when one was hidden.
	policyID string
	// budgetBase is the run's model budget as its first budget check
	// recorded it, before any grant (nil before one).
	budgetBase *events.ModelUsage
}

func newRunState() *runState {
	return &runState{specs: map[string]events.ToolSpec{}}
}

// event handles one stored message. report says whether it may be reported
// (false for the events of a run read from its start to give context).
func (c *checker) event(ctx context.Context, r events.RawRecord, report bool) error {
	return c.decoded(ctx, decode(r), report)
}

// record is a stored message decoded: the event (or why it does not
// decode) and the hash of its bytes, which the run's next event must name.
type record struct {
	raw  events.RawRecord
	ev   events.Event
	err  error
	hash string
}

func decode(r events.RawRecord) record {
	e, err := events.Decode(r.Data)
	if err != nil {
		return record{raw: r, err: err}
	}
	return record{raw: r, ev: e, hash: events.Hash(r.Data)}
}

// decoded handles one decoded message.
func (c *checker) decoded(ctx context.Context, rec record, report bool) error {
	r, e := rec.raw, rec.ev
	c.sum.Events++
	if report && c.opts.Progress != nil && c.sum.Events%progressEvery == 0 {
		c.progress(r.StreamSeq)
	}
	if rec.err != nil {
		c.breakRun(c.runOfSubject(r.Subject), r.StreamSeq, fmt.Sprintf("the event at stream seq %d does not decode: %v", r.StreamSeq, rec.err))
		return nil
	}
	if !c.onSubject(r.Subject, e) {
		c.breakRun(e.Run, r.StreamSeq, fmt.Sprintf("event %d (%s) is stored on %s, not %s", e.Seq, e.Kind, r.Subject, c.log.Subject(e.Run, e.Kind)))
		return nil
	}
	if !events.Appended(r.Header, e) {
		c.breakRun(e.Run, r.StreamSeq, fmt.Sprintf("event %d (%s) on %s was not stored by an append: its message id is not the event's id", e.Seq, e.Kind, r.Subject))
		return nil
	}
	var err error
	st := c.runs[e.Run]
	if st == nil {
		if st, err = c.enter(ctx, e, r.StreamSeq); err != nil {
			return err
		}
	}
	if st.broken == "" {
		switch {
		case e.Seq != st.count+1:
			c.breakRun(e.Run, r.StreamSeq, fmt.Sprintf("event %d follows event %d: an event is missing or out of order", e.Seq, st.count))
		case e.Prev != st.last:
			c.breakRun(e.Run, r.StreamSeq, fmt.Sprintf("event %d does not chain onto event %d: one of them was altered, or an event removed or inserted", e.Seq, st.count))
		}
	}
	if st.broken != "" {
		return c.afterBreak(st, e, r, report)
	}
	if err := c.flush(st, false); err != nil {
		return err
	}
	st.count, st.last = e.Seq, rec.hash
	switch e.Kind {
	case events.StepPolicy, events.ApprovalRequested:
		err = c.evaluation(ctx, st, e, r.StreamSeq, report)
	case events.StepDecided:
		err = c.decided(ctx, st, e, r.StreamSeq, report)
	case events.RunFailed:
		err = c.failedRun(ctx, st, e, r.StreamSeq, report)
	case events.ApprovalGranted, events.ApprovalDenied:
		err = c.decision(st, e, r.StreamSeq, report)
	case events.StepObserved:
		err = c.observed(ctx, st, e, r.StreamSeq, report)
	case events.ModelAttempted, events.ApprovalBudget:
		err = c.budget(st, e, r.StreamSeq, report)
	default:
		c.fold(st, e, r.StreamSeq)
	}
	if err != nil {
		return err
	}
	if st.broken != "" { // e does not fold
		return c.afterBreak(st, e, r, report)
	}
	if st.view.Run.Status.Ended() {
		return c.leave(e.Run)
	}
	return nil
}

// enter starts keeping run e.Run, met at event e. A run met mid-way (the
// selection starts after its first event, or it ended and was dropped before
// a late operator decision) is read from its first event up to e, folded and
// verified, but not reported.
func (c *checker) enter(ctx context.Context, e events.Event, seq uint64) (*runState, error) {
	st := newRunState()
	c.runs[e.Run] = st
	c.sum.PeakRuns = max(c.sum.PeakRuns, len(c.runs))
	if e.Seq == 1 {
		c.sum.Runs++
		return st, nil
	}
	first := true
	err := c.readRaw(ctx, e.Run, 1, seq-1, func(r events.RawRecord) error {
		if first && r.StreamSeq < c.from {
			c.sum.Runs++
		}
		first = false
		return c.event(ctx, r, false)
	})
	if err != nil {
		return nil, err
	}
	// Reading the start may have ended the run (a late decision on an ended
	// run): keep it until this event is handled.
	if c.runs[e.Run] == nil {
		c.runs[e.Run] = st
	}
	return c.runs[e.Run], nil
}

// fold applies e to st's view; an event that does not fold breaks the run.
func (c *checker) fold(st *runState, e events.Event, seq uint64) {
	if err := st.view.Apply(e); err != nil {
		c.breakRun(e.Run, seq, fmt.Sprintf("event %d (%s) does not fold: %v", e.Seq, e.Kind, err))
		return
	}
	if e.Kind == events.RunCreated || e.Kind == events.RunTools {
		for _, s := range st.view.Run.Tools {
			if c.verifiedSpec(s) {
				st.specs[s.Hash] = s
			} else {
				if st.bad == nil {
					st.bad = map[string]bool{}
				}
				st.bad[s.Hash] = true
			}
		}
	}
}

// breakRun records that run's history cannot be trusted from stream
// sequence seq on. The run's result waiting for this event is reported not
// checkable: if the chain broke here, nothing vouches for it.
func (c *checker) breakRun(run string, seq uint64, reason string) {
	st := c.runs[run]
	if run != "" && st == nil {
		st = newRunState()
		c.runs[run] = st
		c.sum.PeakRuns = max(c.sum.PeakRuns, len(c.runs))
	}
	if st != nil && st.broken != "" {
		return // a run breaks once
	}
	c.sum.Tampered++
	if len(c.sum.Breaks) < MaxBreaks {
		c.sum.Breaks = append(c.sum.Breaks, Break{Run: run, StreamSeq: seq, Reason: reason})
	}
	if st == nil {
		return
	}
	st.broken = "tampered: " + reason
	if st.pending != nil {
		notCheckable(st.pending, Tampered, "tampered: the run's next event does not vouch for it ("+reason+")")
	}
	st.view = projector.View{} // nothing more is folded
}

// afterBreak handles an event of a run whose history broke: an evaluation
// is reported not checkable, and the run is forgotten at its end.
func (c *checker) afterBreak(st *runState, e events.Event, r events.RawRecord, report bool) error {
	if err := c.flush(st, false); err != nil {
		return err
	}
	b, ok, err := events.PolicyResult(e)
	if (ok || (err != nil && e.Kind != events.StepDecided)) && report && c.inSelection(r.StreamSeq, e) {
		res := Result{
			Run: e.Run, Step: b.Step, StreamSeq: r.StreamSeq, Event: e.ID, Kind: e.Kind, Time: e.Time,
			Tool: st.specs[b.ToolHash].Name, PolicyID: b.PolicyID, Resume: b.Resume, Consumes: b.Consumes,
			Recorded: Ruling{Outcome: b.Outcome, Reason: b.Reason, Approval: recordedApproval(b.Approval)},
		}
		if c.tool != "" && res.Tool != c.tool {
			return nil
		}
		notCheckable(&res, Tampered, st.broken)
		if err := c.emit(res); err != nil {
			return err
		}
	}
	if (e.Kind == events.ApprovalGranted || e.Kind == events.ApprovalDenied) && report && c.inSelection(r.StreamSeq, e) && c.tool == "" {
		d, _ := events.DecodeBody[events.DecisionBody](e)
		g := GrantResult{
			Run: e.Run, StreamSeq: r.StreamSeq, Event: e.ID, Time: e.Time, Approval: d.Approval,
			Decision: d.Decision, Operator: d.Operator, Verdict: GrantUnverified,
			Reason: "the run's history broke before it: the approval it names cannot be trusted",
		}
		if len(c.opts.Operators) > 0 {
			if err := approvals.Verify(c.opts.Operators, e.Run, d); err != nil {
				g.Verdict, g.Reason = GrantInvalid, err.Error()
			}
		}
		if err := c.emitGrant(g); err != nil {
			return err
		}
	}
	if e.Kind.Terminal() {
		delete(c.runs, e.Run)
	}
	return nil
}

// onSubject reports whether subject is where e belongs, without building
// the subject: this runs for every event read.
func (c *checker) onSubject(subject string, e events.Event) bool {
	rest, ok := strings.CutSuffix(subject, "."+string(e.Kind))
	if !ok {
		return false
	}
	rest, ok = strings.CutSuffix(rest, "."+e.Run)
	return ok && rest == c.prefix(e.Run)
}

// prefix is the subject prefix of run's shard.
func (c *checker) prefix(run string) string {
	if c.log.Config().Shards == 1 {
		return c.log.Config().Prefix
	}
	if c.prefixes == nil {
		c.prefixes = make([]string, c.log.Config().Shards)
		for k := range c.prefixes {
			c.prefixes[k] = layout.ShardPrefix(c.log.Config().Prefix, c.log.Config().Shards, k)
		}
	}
	return c.prefixes[c.log.Shard(run)]
}

// runOfSubject returns the run token of a run subject, or "".
func (c *checker) runOfSubject(subject string) string {
	rest, ok := strings.CutPrefix(subject, c.log.Config().Prefix+".")
	if !ok {
		return ""
	}
	if c.log.Config().Shards > 1 {
		if _, rest, ok = strings.Cut(rest, "."); !ok {
			return ""
		}
	}
	run, _, _ := strings.Cut(rest, ".")
	if events.ValidRunID(run) != nil {
		return ""
	}
	return run
}

// flush reports st's waiting result. unconfirmed says no later event of
// the run vouched for it.
func (c *checker) flush(st *runState, unconfirmed bool) error {
	if st.pending == nil {
		return nil
	}
	res := *st.pending
	st.pending = nil
	res.Unconfirmed = unconfirmed && res.Verdict != NotCheckable
	return c.emit(res)
}

// leave reports run's waiting result and forgets the run.
func (c *checker) leave(run string) error {
	st := c.runs[run]
	delete(c.runs, run)
	if st == nil {
		return nil
	}
	return c.flush(st, true)
}

// leaveAll leaves every run still kept, reporting their waiting results in
// stream order.
func (c *checker) leaveAll() error {
	type waiting struct {
		run string
		seq uint64
	}
	var ws []waiting
	for run, st := range c.runs {
		var seq uint64
		if st.pending != nil {
			seq = st.pending.StreamSeq
		}
		ws = append(ws, waiting{run, seq})
	}
	slices.SortFunc(ws, func(a, b waiting) int {
		if n := cmp.Compare(a.seq, b.seq); n != 0 {
			return n
		}
		return strings.Compare(a.run, b.run)
	})
	for _, w := range ws {
		if err := c.leave(w.run); err != nil {
			return err
		}
	}
	return nil
}

// emit counts res and hands it to the caller.
func (c *checker) emit(res Result) error {
	c.sum.Evaluations++
	switch res.Verdict {
	case Same:
		c.sum.Same++
	case Different:
		c.sum.Different++
	case NotCheckable:
		c.sum.NotCheckable++
	}
	switch res.Change {
	case Widens:
		c.sum.Widens++
	case Narrows:
		c.sum.Narrows++
	case Changed:
		c.sum.Changed++
	}
	if res.GrantProblem != "" {
		c.sum.ConsumedInvalid++
	}
	return c.fn(res)
}

// inSelection reports whether the event e, stored at seq, is selected by
// sequence and time (the tool is checked where it is known).
func (c *checker) inSelection(seq uint64, e events.Event) bool {
	if seq < c.from || seq > c.to {
		return false
	}
	if !c.sel.Since.IsZero() && e.Time.Before(c.sel.Since) {
		return false
	}
	if !c.sel.Until.IsZero() && e.Time.After(c.sel.Until) {
		return false
	}
	return true
}
