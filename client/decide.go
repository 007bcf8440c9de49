package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Decision is an operator's answer to an approval, for [Client.Decide].
type Decision struct {
	// Decision is [events.DecisionGrant] or [events.DecisionDeny].
	Decision string
	// Reason is recorded with the decision, for people.
	Reason string
	// Hash, when set, is the approval hash the operator was shown: the
	// decision is signed only if the approval still has it.
	Hash string
	// At is the signing time. Zero: now.
	At time.Time
}

// Decided is a decision [Client.Decide] published.
type Decided struct {
	// Run, Approval and Decision are what was decided: the run, the
	// approval's id, grant or deny.
	Run, Approval, Decision string
	// Operator is the signing key's public key (U…).
	Operator string
	// Seq is the decision's sequence in the decisions stream.
	Seq uint64
	// Unnudged is set when the decision is stored but the fleet was not
	// nudged: a worker records it on its next look at the run.
	Unnudged error
}

// Decide signs d on approval id of run with key (an operator's nkeys user
// key pair, see `arbiter keygen`), publishes it on the run's decision
// subject and nudges the fleet; the worker that drives the run verifies
// and records it (ADR 0007). It returns once the decision is stored, not
// recorded: [Client.Wait] or the run's events show the record.
//
// A publish the server did not answer (no responders while a stream
// leader is elected, a timeout) is sent again, at most three times in all:
// the decision's message id is its signature, so it is stored once.
//
// Errors: a decision that is neither grant nor deny wraps
// [approvals.ErrBadDecision]; a run with no such approval wraps
// [approvals.ErrNoApproval]; an approval that is not pending, or a run
// that does not wait on it, wraps [approvals.ErrNotPending]; a Hash that
// is not the approval's wraps [approvals.ErrWrongHash] (nothing is signed
// in any of these); an unreadable run wraps [ErrBroken].
func (c *Client) Decide(ctx context.Context, key nkeys.KeyPair, run, id string, d Decision) (Decided, error) {
	if d.Decision != events.DecisionGrant && d.Decision != events.DecisionDeny {
		return Decided{}, fmt.Errorf("decide %s: %w: %q (want %s or %s)", id, approvals.ErrBadDecision, d.Decision, events.DecisionGrant, events.DecisionDeny)
	}
	v, err := c.View(ctx, run)
	if err != nil {
		return Decided{}, err
	}
	a := v.Approval(id)
	switch {
	case a == nil:
		return Decided{}, fmt.Errorf("decide: %w: run %s has no approval %q", approvals.ErrNoApproval, run, id)
	case a.State != projector.Pending || v.Run.Status != projector.Waiting:
		return Decided{}, fmt.Errorf("decide: %w: approval %s is %s and run %s is %s; nothing signed", approvals.ErrNotPending, id, a.State, run, v.Run.Status)
	case d.Hash != "" && d.Hash != a.Hash:
		return Decided{}, fmt.Errorf("decide: %w: approval %s has hash %s, not the %q shown; look again, nothing signed", approvals.ErrWrongHash, id, a.Hash, d.Hash)
	}
	if d.At.IsZero() {
		d.At = time.Now()
	}
	signed, err := approvals.Sign(key, run, id, a.Hash, d.Decision, strings.TrimSpace(d.Reason), d.At)
	if err != nil {
		return Decided{}, fmt.Errorf("decide %s: %w", id, err)
	}
	var seq uint64
	for try := 1; ; try++ {
		seq, err = approvals.Publish(ctx, c.log, run, signed)
		if err == nil || try == 3 || !transient(err) || pause(ctx, 250*time.Millisecond) != nil {
			break
		}
	}
	if err != nil {
		return Decided{}, fmt.Errorf("decide %s: %w", id, err)
	}
	out := Decided{Run: run, Approval: id, Decision: d.Decision, Operator: signed.Operator, Seq: seq}
	out.Unnudged = c.nudge(ctx, run, fmt.Sprintf("decided-%d", seq))
	return out, nil
}

// transient reports whether a publish may simply be sent again.
func transient(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// Grant is [Client.Decide] with a grant.
func (c *Client) Grant(ctx context.Context, key nkeys.KeyPair, run, id, reason string) (Decided, error) {
	return c.Decide(ctx, key, run, id, Decision{Decision: events.DecisionGrant, Reason: reason})
}

// Deny is [Client.Decide] with a denial.
func (c *Client) Deny(ctx context.Context, key nkeys.KeyPair, run, id, reason string) (Decided, error) {
	return c.Decide(ctx, key, run, id, Decision{Decision: events.DecisionDeny, Reason: reason})
}

// Waiting is a run found by [Client.Approvals]: its pending approval, or
// why it cannot be read.
type Waiting struct {
	// Run is the run's id; Approval the approval it waits on.
	Run      string
	Approval projector.Approval
	// Err is set for a run with approvals whose events do not verify or
	// fold: it is reported, never hidden, and nothing of it executes.
	Err error
}

// Approvals lists the approvals waiting for a decision, by run id, and
// the runs with approvals that cannot be read (Err set). One broken run
// never hides the others.
func (c *Client) Approvals(ctx context.Context) ([]Waiting, error) {
	ids, err := c.runsWith(ctx, events.ApprovalRequested)
	if err != nil {
		return nil, err
	}
	// A run over its model budget waits on an approval of its own kind.
	budgets, err := c.runsWith(ctx, events.ApprovalBudget)
	if err != nil {
		return nil, err
	}
	ids = slices.Compact(slices.Sorted(slices.Values(append(ids, budgets...))))
	var out []Waiting
	for _, id := range ids {
		v, err := c.View(ctx, id)
		if err != nil {
			out = append(out, Waiting{Run: id, Err: err})
			continue
		}
		if a := v.PendingApproval(); a != nil && a.State == projector.Pending && v.Run.Status == projector.Waiting {
			out = append(out, Waiting{Run: id, Approval: *a})
		}
	}
	return out, nil
}

// runsWith lists, sorted, the runs that have an event of kind k: the
// subjects the streams hold for it.
func (c *Client) runsWith(ctx context.Context, k events.Kind) ([]string, error) {
	var ids []string
	for shard := 0; shard < c.log.Config().Shards; shard++ {
		s, err := c.log.JetStream().Stream(ctx, c.log.StreamName(shard))
		if err != nil {
			return nil, fmt.Errorf("list runs with %s: %w", k, err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(c.log.KindFilter(shard, k)))
		if err != nil {
			return nil, fmt.Errorf("list runs with %s: %w", k, err)
		}
		suffix := "." + string(k)
		for subj := range info.State.Subjects {
			rest := strings.TrimSuffix(subj, suffix)
			ids = append(ids, rest[strings.LastIndexByte(rest, '.')+1:])
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// WaitApproval waits until run waits on a pending approval and returns
// it. A run that ends first is an error wrapping [ErrEnded]; errors of
// reading as [Client.Read].
func (c *Client) WaitApproval(ctx context.Context, run string) (projector.Approval, error) {
	for {
		v, err := c.View(ctx, run)
		if err != nil && !errors.Is(err, ErrNoRun) {
			return projector.Approval{}, err
		}
		if a := v.PendingApproval(); err == nil && a != nil && a.State == projector.Pending && v.Run.Status == projector.Waiting {
			return *a, nil
		}
		if v.Run.Status.Ended() {
			return projector.Approval{}, fmt.Errorf("wait for an approval of run %s: %w %s %s", run, ErrEnded, v.Run.Status, v.Run.Reason)
		}
		if err := pause(ctx, c.poll); err != nil {
			return projector.Approval{}, fmt.Errorf("wait for an approval of run %s: %w", run, err)
		}
	}
}
