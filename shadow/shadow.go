// Package shadow owns the shadow-mode report: where a candidate policy, run
// beside the enforcing one and recorded on every step
// ([events.PolicyBody.Shadow]), would have decided differently. It reads the
// log and never writes to it, runs nothing and asks no policy: the
// candidate's answers were recorded as it gave them.
package shadow

import (
	"context"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/events"
)

// Changes a shadow answer can make.
const (
	Widens  = "widens"  // the candidate lets through what the policy did not
	Narrows = "narrows" // the candidate refuses or holds what the policy let through
	Changed = "changed" // as strict, but otherwise (another approval kind, deny for abort)
)

// Finding is one recorded evaluation where the candidate differed.
type Finding struct {
	Run    string    `json:"run"`
	Step   int       `json:"step"`
	Tool   string    `json:"tool"`
	Time   time.Time `json:"time"`
	Change string    `json:"change"`
	// Recorded is what the enforcing policy decided, Shadow what the
	// candidate said.
	PolicyID       string         `json:"policy_id"`
	Recorded       events.Outcome `json:"recorded"`
	RecordedReason string         `json:"recorded_reason,omitempty"`
	ShadowID       string         `json:"shadow_id"`
	Shadow         events.Outcome `json:"shadow"`
	ShadowReason   string         `json:"shadow_reason,omitempty"`
}

// Summary counts what a report read.
type Summary struct {
	Evaluations int `json:"evaluations"`
	Shadowed    int `json:"shadowed"`
	Same        int `json:"same"`
	Widens      int `json:"widens"`
	Narrows     int `json:"narrows"`
	Changed     int `json:"changed"`
}

// strictness orders outcomes from the most permissive; a candidate's error
// counts as the strictest (the runtime fails closed on one).
func strictness(outcome events.Outcome) int {
	switch outcome {
	case events.Allow:
		return 0
	case events.RequireApproval:
		return 1
	case events.Deny:
		return 2
	}
	return 3 // abort, error
}

// Compare says how the shadow answer recorded on b differs from b's own
// outcome: "" when it does not (or b has none).
func Compare(b events.PolicyBody) string {
	s := b.Shadow
	if s == nil {
		return ""
	}
	rs, ss := strictness(b.Outcome), strictness(s.Outcome)
	switch {
	case ss < rs:
		return Widens
	case ss > rs:
		return Narrows
	case b.Outcome != s.Outcome:
		return Changed
	case b.Outcome == events.RequireApproval && b.Approval != nil && b.Approval.Kind != s.ApprovalKind:
		return Changed
	}
	return ""
}

// reporter folds events into findings.
type reporter struct {
	since time.Time
	tools map[string]map[int]string // run → step → tool
	sum   Summary
	fn    func(Finding) error
}

func newReporter(since time.Time, fn func(Finding) error) *reporter {
	return &reporter{since: since, tools: map[string]map[int]string{}, fn: fn}
}

func (r *reporter) event(e events.Event) error {
	var b *events.PolicyBody
	switch e.Kind {
	case events.StepDecided:
		d, err := events.DecodeBody[events.StepDecidedBody](e)
		if err != nil {
			return err
		}
		if r.tools[e.Run] == nil {
			r.tools[e.Run] = map[int]string{}
		}
		r.tools[e.Run][d.Step] = d.Tool
		b = d.Policy // a result recorded with its decision (ADR 0017)
	case events.StepPolicy, events.ApprovalRequested:
		pb, err := events.DecodeBody[events.PolicyBody](e)
		if err != nil {
			return err
		}
		b = &pb
	case events.RunFailed:
		eb, err := events.DecodeBody[events.EndBody](e)
		if err != nil {
			return err
		}
		b = eb.Policy
	case events.RunFinished, events.RunCancelled:
		delete(r.tools, e.Run)
	}
	if b == nil || e.Time.Before(r.since) {
		return nil
	}
	r.sum.Evaluations++
	if b.Shadow == nil {
		return nil
	}
	r.sum.Shadowed++
	change := Compare(*b)
	switch change {
	case "":
		r.sum.Same++
		return nil
	case Widens:
		r.sum.Widens++
	case Narrows:
		r.sum.Narrows++
	default:
		r.sum.Changed++
	}
	return r.fn(Finding{
		Run: e.Run, Step: b.Step, Tool: r.tools[e.Run][b.Step], Time: e.Time, Change: change,
		PolicyID: b.PolicyID, Recorded: b.Outcome, RecordedReason: b.Reason,
		ShadowID: b.Shadow.PolicyID, Shadow: b.Shadow.Outcome, ShadowReason: b.Shadow.Reason,
	})
}

// Runs reports on the given runs, each read whole and its hash chain
// verified, calling fn with each finding in order.
func Runs(ctx context.Context, log *events.Log, runs []string, fn func(Finding) error) (Summary, error) {
	r := newReporter(time.Time{}, fn)
	for _, id := range runs {
		recs, _, err := log.Read(ctx, id)
		if err != nil {
			return r.sum, fmt.Errorf("shadow report of run %s: %w", id, err)
		}
		for _, rec := range recs {
			if err := r.event(rec.Event); err != nil {
				return r.sum, fmt.Errorf("shadow report of run %s: %w", id, err)
			}
		}
	}
	return r.sum, nil
}

// Since reports on every evaluation recorded at or after since, in every
// shard, in stream order. Events are held to their subjects; a run's hash
// chain is not verified here (read the run with [Runs] for that).
func Since(ctx context.Context, log *events.Log, since time.Time, fn func(Finding) error) (Summary, error) {
	r := newReporter(since, fn)
	for k := 0; k < log.Config().Shards; k++ {
		err := log.Scan(ctx, k, 1, func(raw events.RawRecord) error {
			e, err := events.Decode(raw.Data)
			if err != nil {
				return fmt.Errorf("stream %s seq %d: %w", raw.Stream, raw.StreamSeq, err)
			}
			if err := log.CheckStored(raw.Subject, raw.Header, e); err != nil {
				return fmt.Errorf("stream %s seq %d: %w", raw.Stream, raw.StreamSeq, err)
			}
			return r.event(e)
		})
		if err != nil {
			return r.sum, fmt.Errorf("shadow report since %s: %w", since.Format(time.RFC3339), err)
		}
	}
	return r.sum, nil
}
