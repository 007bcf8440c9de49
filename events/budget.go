package events

// BudgetApproval is the kind of the approval a run waits on when its next
// model call would pass its budget and the agent's config says to ask an
// operator (see [ApprovalBudget]).
const BudgetApproval = "budget"

// BudgetBody is the body of [ApprovalBudget]: the attempt a budget stopped,
// what the run's model calls were charged before it, the limit it would
// pass, and what a grant adds to that limit.
//
// Approval is the request an operator decides, with kind [BudgetApproval];
// its capability binds Call, Attempt, Limit and Raise, its presentation
// Used, Reserve and Over, and its hash both (approvals.Budget builds them,
// approvals.CheckBudget re-checks them), so a grant signed for it raises
// exactly Raise, once, for this run.
type BudgetBody struct {
	Approval ApprovalRequest `json:"approval"`
	// Call and Attempt name the attempt that waits (the next one).
	Call    int `json:"call"`
	Attempt int `json:"attempt"`
	// Limit is the budget in force: the agent's configured budget plus
	// what the grants used so far raised it by (a zero field: no limit).
	Limit ModelUsage `json:"limit"`
	// Used is what the run's model calls were charged before the attempt.
	Used ModelUsage `json:"used"`
	// Reserve is what the attempt reserves.
	Reserve ModelUsage `json:"reserve"`
	// Over says which limits Used plus Reserve passes, for a person.
	Over string `json:"over"`
	// Raise is what a grant adds to Limit: for each limit passed, at
	// least what the attempt lacks; nothing for the others.
	Raise ModelUsage `json:"raise"`
}

// Exceeds reports whether u passes limit in any dimension limit bounds (a
// zero field of limit is no limit).
func (u ModelUsage) Exceeds(limit ModelUsage) bool {
	return (limit.Calls > 0 && u.Calls > limit.Calls) ||
		(limit.InputTokens > 0 && u.InputTokens > limit.InputTokens) ||
		(limit.OutputTokens > 0 && u.OutputTokens > limit.OutputTokens) ||
		(limit.SpendNanoUSD > 0 && u.SpendNanoUSD > limit.SpendNanoUSD)
}

// Raised is limit with raise added to each dimension limit bounds; a
// dimension with no limit stays unlimited whatever raise says.
func (u ModelUsage) Raised(raise ModelUsage) ModelUsage {
	add := func(l, r int64) int64 {
		if l > 0 {
			return l + r
		}
		return l
	}
	return ModelUsage{
		Calls:        int(add(int64(u.Calls), int64(raise.Calls))),
		InputTokens:  add(u.InputTokens, raise.InputTokens),
		OutputTokens: add(u.OutputTokens, raise.OutputTokens),
		SpendNanoUSD: add(u.SpendNanoUSD, raise.SpendNanoUSD),
	}
}
