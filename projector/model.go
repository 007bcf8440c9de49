package projector

import "github.com/arbiter-run/arbiter/events"

// ModelCalls is what a run's model calls came to, folded from its
// model.* events. Budgets are checked against it, so it is all the events
// say and nothing else: a run's totals can be re-checked from its log.
type ModelCalls struct {
	// Used is what attempts with an outcome are charged: each reply's
	// usage and each failure's charge, plus the reservation of every
	// attempt that was followed by another with no outcome between (its
	// worker died after sending it).
	Used events.ModelUsage
	// Open is the latest attempt when it has no outcome yet, or nil.
	Open *events.ModelAttemptBody
	// Replies counts the replies; Attempts the attempts since the last one.
	Replies  int
	Attempts int
	// Last is the latest reply, and LastAt the number of steps decided
	// when it was recorded: the steps after LastAt are its tool calls, in
	// order, so an agent that resumes takes the next one from here rather
	// than asking the model again.
	Last   *events.ModelReplyBody
	LastAt int
	// Raised is what the budget grants used so far add to the run's
	// budget: the sum of their raises (see [events.BudgetBody]).
	Raised events.ModelUsage
}

// Charged is what the run's model calls are charged: Used plus the
// reservation of the open attempt, whose outcome is unknown.
func (m ModelCalls) Charged() events.ModelUsage {
	if m.Open == nil {
		return m.Used
	}
	return m.Used.Add(m.Open.Reserve)
}

func (m ModelCalls) clone() ModelCalls {
	c := m
	if m.Open != nil {
		o := *m.Open
		c.Open = &o
	}
	if m.Last != nil {
		l := *m.Last
		l.ToolCalls = cloneSlice(m.Last.ToolCalls)
		c.Last = &l
	}
	return c
}

func (v *View) modelAttempted(e events.Event, b events.ModelAttemptBody) error {
	m := &v.Model
	if b.Call != m.Replies+1 || b.Attempt != m.Attempts+1 {
		return v.errf(e, "model call %d attempt %d after %d replies and %d attempts", b.Call, b.Attempt, m.Replies, m.Attempts)
	}
	grant, err := v.useBudgetGrant(e, b.Grant)
	if err != nil {
		return err
	}
	if grant != nil {
		grant.State = Consumed
		m.Raised = m.Raised.Add(grant.Raise)
		v.Run.Status, v.Run.Reason = Running, ""
	}
	if m.Open != nil {
		m.Used = m.Used.Add(m.Open.Reserve)
	}
	m.Open, m.Attempts = &b, m.Attempts+1
	return nil
}

func (v *View) modelReplied(e events.Event, b events.ModelReplyBody) error {
	m := &v.Model
	if err := v.modelOutcome(e, b.Call, b.Attempt); err != nil {
		return err
	}
	if len(b.ToolCalls) == 0 {
		b.ToolCalls = nil // the same view whether folded from the body or its bytes
	}
	m.Used = m.Used.Add(b.Usage)
	m.Open, m.Attempts, m.Replies = nil, 0, m.Replies+1
	m.Last, m.LastAt = &b, v.Run.Steps
	return nil
}

func (v *View) modelFailed(e events.Event, b events.ModelFailBody) error {
	m := &v.Model
	if err := v.modelOutcome(e, b.Call, b.Attempt); err != nil {
		return err
	}
	m.Used = m.Used.Add(b.Charge)
	m.Open = nil
	return nil
}

// modelOutcome checks that an outcome answers the open attempt.
func (v *View) modelOutcome(e events.Event, call, attempt int) error {
	o := v.Model.Open
	if o == nil {
		return v.errf(e, "outcome of model call %d attempt %d, which has no open attempt", call, attempt)
	}
	if o.Call != call || o.Attempt != attempt {
		return v.errf(e, "outcome of model call %d attempt %d, but the open attempt is call %d attempt %d", call, attempt, o.Call, o.Attempt)
	}
	return nil
}
