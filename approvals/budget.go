package approvals

import (
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
)

// ErrBudgetRequest marks a budget approval whose capability, presentation
// or hash is not the one its own fields make (see [CheckBudget]).
var ErrBudgetRequest = errors.New("budget approval does not match its fields")

// budgetCapability is what a grant of a budget approval allows: the one
// attempt it is for, the limit it finds and what it adds to it.
type budgetCapability struct {
	Call    int               `json:"call"`
	Attempt int               `json:"attempt"`
	Limit   events.ModelUsage `json:"limit"`
	Raise   events.ModelUsage `json:"raise"`
}

// budgetPresentation is what the operator is shown beside it.
type budgetPresentation struct {
	Used    events.ModelUsage `json:"used"`
	Reserve events.ModelUsage `json:"reserve"`
	Over    string            `json:"over"`
}

// Budget returns b with its approval's kind, capability, presentation and
// hash made from b's fields (the hash as [Hash] computes it, over no tool
// and no arguments). The caller sets the approval's id, reason and
// expiry.
func Budget(b events.BudgetBody) (events.BudgetBody, error) {
	capability, presentation, err := budgetJSON(b)
	if err != nil {
		return b, err
	}
	b.Approval.Kind = events.BudgetApproval
	b.Approval.Capability, b.Approval.Presentation = capability, presentation
	b.Approval.Hash = Hash(events.BudgetApproval, capability, presentation, events.ToolSpec{}, nil)
	return b, nil
}

// CheckBudget reports whether b's approval is exactly what [Budget] makes
// of b's fields: a worker that recorded another capability, presentation
// or hash than its fields say could have an operator sign one raise and
// the run use another. The error wraps [ErrBudgetRequest].
func CheckBudget(b events.BudgetBody) error {
	want, err := Budget(b)
	if err != nil {
		return err
	}
	a, w := b.Approval, want.Approval
	switch {
	case a.Kind != w.Kind:
		return fmt.Errorf("%w: approval %s has kind %q", ErrBudgetRequest, a.ID, a.Kind)
	case !jsonform.Equal(a.Capability, w.Capability):
		return fmt.Errorf("%w: approval %s capability %s, its fields make %s", ErrBudgetRequest, a.ID, a.Capability, w.Capability)
	case !jsonform.Equal(a.Presentation, w.Presentation):
		return fmt.Errorf("%w: approval %s presentation %s, its fields make %s", ErrBudgetRequest, a.ID, a.Presentation, w.Presentation)
	case a.Hash != w.Hash:
		return fmt.Errorf("%w: approval %s hash %s, its fields make %s", ErrBudgetRequest, a.ID, a.Hash, w.Hash)
	}
	return nil
}

func budgetJSON(b events.BudgetBody) (capability, presentation []byte, err error) {
	capability, err = jsonform.Marshal(budgetCapability{Call: b.Call, Attempt: b.Attempt, Limit: b.Limit, Raise: b.Raise})
	if err != nil {
		return nil, nil, fmt.Errorf("budget approval capability: %w", err)
	}
	presentation, err = jsonform.Marshal(budgetPresentation{Used: b.Used, Reserve: b.Reserve, Over: b.Over})
	if err != nil {
		return nil, nil, fmt.Errorf("budget approval presentation: %w", err)
	}
	return capability, presentation, nil
}
