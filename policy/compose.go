package policy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// Composed is policies combined so that every member is asked and the
// strongest answer wins: abort, then deny, then require_approval, then
// allow. Deny wins whatever the members' order; the order decides only
// which approval is asked for when several members ask (the first) and the
// order of the record.
type Composed struct {
	members  []IdentifiedPolicy
	prefixes []string // "1 / ", "2 / ": what a member's own parts' ids start with
	// partIDs holds, per member, its parts' ids already prefixed: a rules
	// file's parts are the same few ids on every step, and prefixing them
	// afresh was an allocation per part per step. Bounded by maxPartIDs.
	partIDs []*partIDs
	// shared marks the members that read nothing of the view or of the
	// request's bytes and keep nothing (the side-effect mapping): they are
	// handed the composed policy's own copies instead of a copy each.
	shared []bool
	// appenders holds, per member that offers one (see [PartsAppender]),
	// its evaluator writing straight into the composed ruling's parts with
	// its ids prefixed; nil for the others.
	appenders []PartsEvaluator
	// hint is how many parts the last ruling had: the next is made that
	// size, instead of the members' slices copied into one grown to fit.
	hint atomic.Int32
	id   string
}

// PartsAppender is a policy that, as a member of a [Composed] policy, can
// write its parts straight into the composed ruling's with their ids
// already prefixed, instead of handing back a slice of its own for the
// composition to copy and prefix part by part (a rules file's dozen parts
// on every step). [Compose] asks each member that implements it for its
// evaluator once.
type PartsAppender interface {
	IdentifiedPolicy
	// AppendingParts returns an evaluator that answers exactly as the
	// policy's Evaluate does, its parts' ids prefixed with prefix.
	AppendingParts(prefix string) PartsEvaluator
}

// PartsEvaluator is a [PartsAppender]'s evaluator.
type PartsEvaluator interface {
	// EvaluateAppend answers as the policy's Evaluate, with the ruling's
	// Parts being dst with the policy's own parts, prefixed, appended
	// (dst's elements unchanged; grown as append grows it).
	EvaluateAppend(ctx context.Context, req Request, view projector.View, dst []events.PolicyPart) (Ruling, error)
}

// maxPartIDs bounds the prefixed part ids kept per member: a Go policy
// may name its parts anything; past the bound they are prefixed on every
// call, as before.
const maxPartIDs = 1024

type partIDs struct {
	m sync.Map // part id → prefixed id
	n atomic.Int32
}

// id returns prefix+id, kept for the next call while there is room.
func (p *partIDs) id(prefix, id string) string {
	if v, ok := p.m.Load(id); ok {
		return v.(string)
	}
	full := prefix + id
	if p.n.Load() < maxPartIDs {
		if _, loaded := p.m.LoadOrStore(id, full); !loaded {
			p.n.Add(1)
		}
	}
	return full
}

// isViewless reports whether p is one this package knows reads only the
// request's tool spec and keeps nothing of what it is handed: the
// side-effect mapping, bare or named. The exact type, so that a type
// embedding the mapping with an Evaluate of its own is not taken for it.
func isViewless(p Policy) bool {
	if n, ok := p.(named); ok {
		p = n.Policy
	}
	_, ok := p.(SideEffectPolicy)
	return ok
}

var _ IdentifiedPolicy = (*Composed)(nil)

// Compose combines members, each of which must have an id (wrap one that
// has none with [WithID]): the composed id is derived from theirs, so a
// change to any member changes it. Errors wrap [ErrBadID].
func Compose(members ...Policy) (*Composed, error) {
	if len(members) == 0 {
		return nil, fmt.Errorf("compose: %w: no members", ErrBadID)
	}
	c := &Composed{}
	h := sha256.New()
	for i, m := range members {
		ip, ok := m.(IdentifiedPolicy)
		if !ok || ip.PolicyID() == "" {
			return nil, fmt.Errorf("compose: %w: member %d has no id (wrap it with policy.WithID)", ErrBadID, i+1)
		}
		if err := ValidateID(ip.PolicyID()); err != nil {
			return nil, fmt.Errorf("compose: member %d: %w", i+1, err)
		}
		c.members = append(c.members, ip)
		c.prefixes = append(c.prefixes, strconv.Itoa(i+1)+" / ")
		c.partIDs = append(c.partIDs, &partIDs{})
		c.shared = append(c.shared, isViewless(ip))
		var pe PartsEvaluator
		if a, ok := ip.(PartsAppender); ok {
			pe = a.AppendingParts(c.prefixes[i])
		}
		c.appenders = append(c.appenders, pe)
		// Length-prefixed, so ids cannot run into one another.
		h.Write([]byte(strconv.Itoa(len(ip.PolicyID())) + ":" + ip.PolicyID() + ","))
	}
	c.id = "all sha256:" + hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// PolicyID is "all sha256:<hex>" over the members' ids in order.
func (c *Composed) PolicyID() string { return c.id }

// Members returns the members' ids in order.
func (c *Composed) Members() []string {
	ids := make([]string, len(c.members))
	for i, m := range c.members {
		ids[i] = m.PolicyID()
	}
	return ids
}

// Evaluate asks every member (none is skipped, whatever an earlier one
// said) and answers with the strongest outcome, whose reason is prefixed
// with the member's id. A member's error, or an outcome outside the four,
// is the composed policy's error: it fails closed. The decision's parts
// name every member's id, outcome and reason, each followed by the
// member's own parts, their ids prefixed with the member's position ("2 /
// p9/r90": rule p9/r90 of the second member). The position, not the
// member's id, because the member's part just before says the id, and a
// rules file's id is a 77-character hash that would otherwise be written
// again for every rule that applied, on every step.
func (c *Composed) Evaluate(ctx context.Context, req Request, view projector.View) (Ruling, error) {
	// The members' rulings, their parts written into parts as they come:
	// each member's own part first, its outcome and reason filled in once
	// it has answered.
	var small [4]Ruling
	ds := small[:0]
	if len(c.members) > len(small) {
		ds = make([]Ruling, 0, len(c.members))
	}
	parts := make([]events.PolicyPart, 0, max(int(c.hint.Load()), len(c.members)))
	for i, m := range c.members {
		// Each member its own copy; the last takes the one this policy was
		// handed, which is already a copy nobody reads after it, and so does
		// a member that reads neither (see isViewless).
		r, v := req, view
		if i < len(c.members)-1 && !c.shared[i] {
			r, v = req.Copy(), view.Clone()
		}
		at := len(parts)
		parts = append(parts, events.PolicyPart{ID: m.PolicyID()})
		var d Ruling
		var err error
		if a := c.appenders[i]; a != nil {
			d, err = a.EvaluateAppend(ctx, r, v, parts)
			if err == nil && len(d.Parts) < len(parts) {
				err = fmt.Errorf("its ruling has %d parts where the %d it was handed should start them", len(d.Parts), len(parts))
			}
			parts, d.Parts = d.Parts, nil
		} else {
			d, err = m.Evaluate(ctx, r, v)
			prefix, ids := c.prefixes[i], c.partIDs[i]
			for _, p := range d.Parts {
				p.ID = ids.id(prefix, p.ID)
				parts = append(parts, p)
			}
		}
		if err != nil {
			return Ruling{}, fmt.Errorf("member %s: %w", m.PolicyID(), err)
		}
		if !d.Outcome.Valid() {
			return Ruling{}, fmt.Errorf("member %s: outcome %q (want allow, deny, abort or require_approval)", m.PolicyID(), d.Outcome)
		}
		parts[at].Outcome, parts[at].Reason = d.Outcome, d.Reason
		ds = append(ds, d)
	}
	c.hint.Store(int32(min(len(parts), maxHint)))
	win, ask := -1, -1
	for i, d := range ds {
		if win < 0 || strength(d.Outcome) > strength(ds[win].Outcome) {
			win = i
		}
		if d.Outcome == events.RequireApproval && ask < 0 {
			ask = i
		}
	}
	out := Ruling{Outcome: ds[win].Outcome, Reason: c.members[win].PolicyID() + ": " + ds[win].Reason, Parts: parts}
	if out.Outcome == events.RequireApproval {
		out.Approval = ds[ask].Approval
	}
	return out, nil
}

// maxHint bounds the size a composed ruling's parts are made at: a ruling
// with more grows its slice as it is written.
const maxHint = 1 << 12

func strength(o events.Outcome) int {
	switch o {
	case events.Abort:
		return 4
	case events.Deny:
		return 3
	case events.RequireApproval:
		return 2
	}
	return 1
}
