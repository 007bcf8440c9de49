package replay

import (
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
)

// BudgetResult is one recorded budget check of a model agent, re-checked
// from the events alone: an attempt made against a budget, or a budget
// approval asked for in its place.
type BudgetResult struct {
	Run       string      `json:"run"`
	StreamSeq uint64      `json:"stream_seq"`
	Event     string      `json:"event"`
	Kind      events.Kind `json:"kind"`
	Time      time.Time   `json:"time"`
	Call      int         `json:"call"`
	Attempt   int         `json:"attempt"`
	// Used is what the events say the run's model calls were charged
	// before the attempt; Reserve what it reserved; Limit the limit
	// recorded with it; Raised what the grants used so far (this
	// attempt's included) add to the budget.
	Used    events.ModelUsage `json:"used"`
	Reserve events.ModelUsage `json:"reserve"`
	Limit   events.ModelUsage `json:"limit"`
	Raised  events.ModelUsage `json:"raised"`
	// Grant is the budget approval the attempt used, or the one asked for.
	Grant string `json:"grant,omitempty"`
	// GrantProblem is set when the grant the attempt used does not verify
	// against [Options.Operators].
	GrantProblem string `json:"grant_problem,omitempty"`
	// Verdict is Same when the check holds, Different (Reason says why)
	// when it does not.
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason,omitempty"`
}

// budget re-checks a model.attempted or approval.budget event against the
// run's view before it is folded, reports it, and folds it. The limit in
// force is the run's first recorded limit (less what grants had raised it
// by then) plus the raises of the grants used since: a limit recorded
// otherwise (a changed config, a raise no grant gave) is Different, as is
// an attempt beyond its limit, or a budget approval whose capability or
// hash is not what its fields make.
func (c *checker) budget(st *runState, e events.Event, seq uint64, report bool) error {
	res, ok := c.budgetResult(st, e, seq)
	if c.fold(st, e, seq); st.broken != "" || !ok {
		return nil
	}
	if !report || !c.inSelection(seq, e) || c.tool != "" {
		return nil
	}
	return c.emitBudget(res)
}

func (c *checker) budgetResult(st *runState, e events.Event, seq uint64) (BudgetResult, bool) {
	m := st.view.Model
	res := BudgetResult{Run: e.Run, StreamSeq: seq, Event: e.ID, Kind: e.Kind, Time: e.Time, Used: m.Charged(), Raised: m.Raised, Verdict: Same}
	var why string
	if e.Kind == events.ApprovalBudget {
		b, err := events.DecodeBody[events.BudgetBody](e)
		if err != nil {
			return res, false // does not fold either: the run breaks there
		}
		res.Call, res.Attempt, res.Reserve, res.Limit, res.Grant = b.Call, b.Attempt, b.Reserve, b.Limit, b.Approval.ID
		if err := approvals.CheckBudget(b); err != nil {
			why = err.Error()
		} else if !res.Used.Add(b.Reserve).Exceeds(b.Limit) {
			why = fmt.Sprintf("asked for an attempt within its limit: %+v used + %+v reserved, limit %+v", res.Used, b.Reserve, b.Limit)
		}
	} else {
		b, err := events.DecodeBody[events.ModelAttemptBody](e)
		if err != nil {
			return res, false
		}
		if b.Limit == (events.ModelUsage{}) && b.Grant == "" {
			return res, false // no budget to check
		}
		res.Call, res.Attempt, res.Reserve, res.Limit, res.Grant = b.Call, b.Attempt, b.Reserve, b.Limit, b.Grant
		if b.Grant != "" {
			if a := st.view.Approval(b.Grant); a != nil {
				res.Raised = res.Raised.Add(a.Raise)
			}
			if p, bad := st.invalid[b.Grant]; bad {
				res.GrantProblem = p
			}
		}
		if res.Used.Add(b.Reserve).Exceeds(b.Limit) {
			why = fmt.Sprintf("made beyond its limit: %+v used + %+v reserved, limit %+v", res.Used, b.Reserve, b.Limit)
		}
	}
	base := minus(res.Limit, res.Raised)
	if st.budgetBase == nil {
		st.budgetBase = &base
	}
	if why == "" && base != *st.budgetBase {
		why = fmt.Sprintf("limit %+v is not the run's budget %+v raised by its grants %+v", res.Limit, *st.budgetBase, res.Raised)
	}
	if why != "" {
		res.Verdict, res.Reason = Different, why
	}
	return res, true
}

// minus is limit without raised, in the dimensions limit bounds.
func minus(limit, raised events.ModelUsage) events.ModelUsage {
	sub := func(l, r int64) int64 {
		if l > 0 {
			return l - r
		}
		return l
	}
	return events.ModelUsage{
		Calls:        int(sub(int64(limit.Calls), int64(raised.Calls))),
		InputTokens:  sub(limit.InputTokens, raised.InputTokens),
		OutputTokens: sub(limit.OutputTokens, raised.OutputTokens),
		SpendNanoUSD: sub(limit.SpendNanoUSD, raised.SpendNanoUSD),
	}
}

// emitBudget counts res and hands it to [Options.OnBudget].
func (c *checker) emitBudget(res BudgetResult) error {
	c.sum.Budgets++
	if res.Verdict == Same {
		c.sum.BudgetsSame++
	} else {
		c.sum.BudgetsDifferent++
	}
	if res.GrantProblem != "" {
		c.sum.ConsumedInvalid++
	}
	if c.opts.OnBudget == nil {
		return nil
	}
	return c.opts.OnBudget(res)
}
