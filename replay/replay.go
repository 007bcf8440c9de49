// Package replay owns the replay audit: it reads recorded runs back from the
// log and, at every recorded policy evaluation, rebuilds the request and the
// view exactly as the policy saw them, asks a given policy again, and reports
// whether it decides the same. It also verifies every recorded operator
// decision (signature and approval hash) and every run's hash chain.
//
// Two questions use it. An auditor asks whether the recorded decisions are
// the ones the named policy makes: [Audit] with the policy under its own id.
// A policy owner asks what a changed policy would have decided differently on
// real traffic: [Audit] with the new policy and [Options.Baseline] naming the
// id of the one that recorded the runs.
//
// Replay must never run a tool, append an event, or change anything it reads.
// It imports events, projector, policy and approvals, and nothing above them.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
)

// Selection says which recorded evaluations and decisions to check. The zero
// value selects the whole log. Whatever is selected, the view handed to the
// policy is always folded from the run's first event, so an evaluation is
// re-checked in full context even when the selection starts mid-run.
type Selection struct {
	// Runs, when set, reads only these runs (each on its own, from its
	// first event to its last).
	Runs []string
	// FromSeq and ToSeq bound the stream sequences read (0: open). With more
	// than one shard they apply to every shard's stream alike.
	FromSeq, ToSeq uint64
	// Since and Until select evaluations and decisions by the time their
	// event records (zero: open). The scan itself is bounded by the
	// stream's own timestamps, widened by [Options.ClockSkew] on each side.
	Since, Until time.Time
	// Tool, when set, selects only evaluations of (and decisions on) calls
	// to this tool.
	Tool string
}

// Options tune a [Audit]. The zero value checks evaluations against the given
// policy's own id and reports every grant as unverified.
type Options struct {
	// Operators are the keys whose signed decisions are valid. Empty: no
	// signature is checked and every decision is reported
	// [GrantUnverified].
	Operators approvals.Operators
	// Baseline is the id of the policy whose recorded evaluations the given
	// policy is compared with. Empty: the given policy's own id, which makes
	// the check an audit (is this the policy that decided?). Set it to
	// compare a changed policy, under its new id, with the one that recorded
	// the runs.
	Baseline string
	// OnGrant, when set, is called with every selected operator decision,
	// in stream order. An error it returns stops the check and is returned.
	OnGrant func(GrantResult) error
	// OnBudget, when set, is called with every selected budget check of a
	// model agent (see [BudgetResult]), in stream order, as it is read. An
	// error it returns stops the check and is returned. Budget checks are
	// selected by sequence and time, never with [Selection.Tool].
	OnBudget func(BudgetResult) error
	// Progress, when set, is called every few thousand events read and at
	// the end of each shard.
	Progress func(Progress)
	// ClockSkew is how far a worker's clock may be from the server's when
	// Since or Until bound the scan. Default five minutes.
	ClockSkew time.Duration
}

// Verdict says how a re-checked evaluation compares.
type Verdict string

// The verdicts.
const (
	// Same: outcome and reason equal, and for require_approval the approval
	// hash (kind, capability, presentation over the same request) too.
	Same Verdict = "same"
	// Different: the policy decides otherwise now; both decisions are in the
	// result.
	Different Verdict = "different"
	// NotCheckable: the evaluation cannot be re-checked exactly, and
	// [Result.Reason] says why. The policy is not asked.
	NotCheckable Verdict = "not_checkable"
)

// Change says which way a [Different] decision moves.
type Change string

// The changes. The order of permission is allow, then require_approval (the
// call runs if a person says so), then deny and abort (it does not run); a
// policy error fails the run and ranks with abort.
const (
	// Widens: the policy now lets through what it did not (allows what it
	// asked approval for or refused, or asks approval for what it refused).
	Widens Change = "widens"
	// Narrows: the reverse.
	Narrows Change = "narrows"
	// Changed: as permissive as before, but different: another reason,
	// another approval (kind, capability or presentation), deny for abort.
	Changed Change = "changed"
)

// Cause says why an evaluation is [NotCheckable].
type Cause string

// The causes.
const (
	// OtherPolicy: recorded by a policy with another id than the one
	// compared with.
	OtherPolicy Cause = "other_policy"
	// NoRecordedID: recorded by a policy with no id.
	NoRecordedID Cause = "no_recorded_id"
	// NoCheckingID: the policy given has no id and no baseline was named,
	// so nothing says the recorded decisions were meant to be its own.
	NoCheckingID Cause = "no_checking_id"
	// SpecNotRecorded: the run recorded no tool spec with the hash the
	// evaluation names (or one whose content does not hash to it), so the
	// request cannot be rebuilt.
	SpecNotRecorded Cause = "spec_not_recorded"
	// Recovery: the runtime raised the approval for a call a crash
	// interrupted; no policy decided it.
	Recovery Cause = "recovery"
	// Tampered: the run's history broke at or before this event (see
	// [Break]).
	Tampered Cause = "tampered"
)

// Approval is the approval a decision asks for.
type Approval struct {
	Kind         string          `json:"kind"`
	Capability   json.RawMessage `json:"capability"`
	Presentation json.RawMessage `json:"presentation"`
	// Hash is the approval hash: as recorded for a recorded decision,
	// computed with [approvals.Hash] over the recorded request for a replayed
	// one.
	Hash string `json:"hash"`
}

// Ruling is one policy answer, recorded or replayed.
type Ruling struct {
	// Outcome is allow, deny, abort, require_approval, or [OutcomeError].
	Outcome  events.Outcome `json:"outcome"`
	Reason   string         `json:"reason,omitempty"`
	Approval *Approval      `json:"approval,omitempty"`
}

// Result is one recorded policy evaluation and how it re-checked.
type Result struct {
	Run       string      `json:"run"`
	Step      int         `json:"step"`
	StreamSeq uint64      `json:"stream_seq"`
	Event     string      `json:"event"`
	Kind      events.Kind `json:"kind"`
	Time      time.Time   `json:"time"`
	Tool      string      `json:"tool"`
	// PolicyID is the id recorded with the evaluation.
	PolicyID string `json:"policy_id,omitempty"`
	// Resume: the evaluation was made on resuming a granted step.
	Resume bool `json:"resume,omitempty"`
	// Consumes is the granted approval the recorded evaluation used up.
	Consumes string `json:"consumes,omitempty"`
	// GrantProblem is set when the grant consumed does not verify against
	// [Options.Operators] (or names another hash): a call ran on it.
	GrantProblem string `json:"grant_problem,omitempty"`

	Verdict Verdict `json:"verdict"`
	// Change is set for a Different verdict.
	Change Change `json:"change,omitempty"`
	// Cause and Reason say why a NotCheckable evaluation is: Cause for
	// programs, Reason for people.
	Cause    Cause   `json:"cause,omitempty"`
	Reason   string  `json:"reason,omitempty"`
	Recorded Ruling  `json:"recorded"`
	Replayed *Ruling `json:"replayed,omitempty"`
	// Unconfirmed: no later event of the run was read, so the hash chain
	// does not vouch for this one (the last event of a run can be altered
	// without breaking the chain).
	Unconfirmed bool `json:"unconfirmed,omitempty"`
}

// GrantVerdict says what a recorded operator decision is worth.
type GrantVerdict string

// The grant verdicts.
const (
	// GrantValid: signed by a configured operator over this run, naming the
	// hash of a pending approval, before it expired.
	GrantValid GrantVerdict = "valid"
	// GrantInvalid: the signature does not verify, the key is not a
	// configured operator, the decision is malformed, or it names another
	// hash than the approval's. A forgery or a mistake; never acted on by a
	// correct worker.
	GrantInvalid GrantVerdict = "invalid"
	// GrantNotActed: validly signed, but it could not take effect: no such
	// approval, not pending any more, or signed after it expired.
	GrantNotActed GrantVerdict = "not_acted"
	// GrantUnverified: it could not be checked in full: no operators were
	// configured, so the signature was not checked (the hash was), or the
	// run's history broke before it, so the approval it names cannot be
	// trusted (the signature was checked).
	GrantUnverified GrantVerdict = "unverified"
)

// GrantResult is one recorded operator decision (approval.granted or
// approval.denied) and how it verified.
type GrantResult struct {
	Run       string       `json:"run"`
	StreamSeq uint64       `json:"stream_seq"`
	Event     string       `json:"event"`
	Time      time.Time    `json:"time"`
	Approval  string       `json:"approval"`
	Step      int          `json:"step,omitempty"`
	Tool      string       `json:"tool,omitempty"`
	Decision  string       `json:"decision"`
	Operator  string       `json:"operator"`
	Verdict   GrantVerdict `json:"verdict"`
	// Reason says why the decision is not valid.
	Reason string `json:"reason,omitempty"`
}

// Break is where a run's recorded history stops being trustworthy: an event
// that does not decode, does not chain onto the one before, is out of
// position, or does not fold.
type Break struct {
	Run       string `json:"run"`
	StreamSeq uint64 `json:"stream_seq"`
	Reason    string `json:"reason"`
}

// MaxBreaks bounds [Summary.Breaks]; [Summary.Tampered] counts them all.
const MaxBreaks = 100

// Summary counts what a [Audit] read and found.
type Summary struct {
	// Events read, including those of a run read from its start because
	// the selection began after it.
	Events uint64 `json:"events"`
	// Runs entered: created in, or first met in, the stretch read.
	Runs        int `json:"runs"`
	Evaluations int `json:"evaluations"`

	Same         int `json:"same"`
	Different    int `json:"different"`
	NotCheckable int `json:"not_checkable"`
	Widens       int `json:"widens"`
	Narrows      int `json:"narrows"`
	Changed      int `json:"changed"`

	Grants           int `json:"grants"`
	GrantsValid      int `json:"grants_valid"`
	GrantsInvalid    int `json:"grants_invalid"`
	GrantsNotActed   int `json:"grants_not_acted"`
	GrantsUnverified int `json:"grants_unverified"`
	// ConsumedInvalid counts evaluations that ran a call, and model
	// attempts made, on a grant that does not verify.
	ConsumedInvalid int `json:"consumed_invalid"`

	// Budgets counts the budget checks of model agents re-checked (see
	// [BudgetResult]), BudgetsSame those that hold, BudgetsDifferent the
	// others.
	Budgets          int `json:"budgets,omitempty"`
	BudgetsSame      int `json:"budgets_same,omitempty"`
	BudgetsDifferent int `json:"budgets_different,omitempty"`

	// Tampered counts runs whose history broke; Breaks lists the first
	// [MaxBreaks] of them.
	Tampered int     `json:"tampered"`
	Breaks   []Break `json:"breaks,omitempty"`
	// PeakRuns is the most runs held in memory at once: runs in flight in
	// the stream, not its length.
	PeakRuns int `json:"peak_runs"`
}

// Clean reports whether nothing needs a person's attention: every
// re-checked evaluation and budget check is the same, no decision is
// invalid, no call ran on an invalid grant, and no run's history broke.
// Evaluations that could not be re-checked do not make a summary unclean;
// they are counted.
func (s Summary) Clean() bool {
	return s.Different == 0 && s.GrantsInvalid == 0 && s.ConsumedInvalid == 0 && s.Tampered == 0 && s.BudgetsDifferent == 0
}

// Progress is where a [Audit] stands.
type Progress struct {
	Shard, Shards int
	// Seq is the stream sequence just read on the shard; Last is the last
	// the check will read there.
	Seq, Last   uint64
	Events      uint64
	Evaluations int
}

// ErrNoPolicy is returned by [Audit] when it is given no policy.
var ErrNoPolicy = errors.New("replay: no policy to check against")

// Audit re-checks the recorded policy evaluations in sel against p, calling
// fn with each [Result], and verifies every recorded operator decision
// (reported to [Options.OnGrant]) and every run's hash chain. It never runs
// a tool and never writes to the log.
//
// It reads the log in one pass, shard by shard. It keeps one folded view per
// run in flight and drops it when the run ends, so its memory follows the
// number of runs in flight, not the length of the stream. A run's results are
// reported in order, each once the run's next event has been read and shown
// to chain onto it (or when the run is left, marked [Result.Unconfirmed]).
//
// An evaluation is re-checked only when it was recorded by the policy being
// compared: by default p's own id ([policy.IdentifiedPolicy]), or
// [Options.Baseline]. Others are [NotCheckable] with the reason. p is handed
// the recorded request (the spec recorded under the evaluation's tool hash,
// the arguments in PolicyJSON form as recorded) and a view equal to the one
// the runtime handed it; as [policy.Policy] says, it must not keep the view
// past its return (the view shares its steps with the check's own fold).
//
// It returns the summary and nil, or the first error fn or OnGrant returned
// (as is), ctx's error, or an error reading the log. A selected run with no
// events is an error wrapping [events.ErrNoRun]. A broken run is not an
// error: it is reported in the summary and its later evaluations are
// NotCheckable.
func Audit(ctx context.Context, log *events.Log, p policy.Policy, sel Selection, opts Options, fn func(Result) error) (Summary, error) {
	if p == nil {
		return Summary{}, ErrNoPolicy
	}
	if fn == nil {
		fn = func(Result) error { return nil }
	}
	if opts.ClockSkew == 0 {
		opts.ClockSkew = 5 * time.Minute
	}
	c := &checker{log: log, policy: p, sel: sel, opts: opts, fn: fn,
		runs: map[string]*runState{}, specs: map[string]events.ToolSpec{}}
	c.checkingID = policy.ID(p)
	c.against = opts.Baseline
	if c.against == "" {
		c.against = c.checkingID
	}
	c.tool = sel.Tool
	err := c.check(ctx)
	if err == nil {
		err = ctx.Err()
	}
	return c.sum, err
}
