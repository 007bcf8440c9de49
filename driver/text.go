package driver

import (
	"strings"
	"unicode/utf8"

	"github.com/arbiter-run/arbiter/events"
)

// cutUTF8 cuts s to at most n bytes without splitting a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// clean returns body with every free-text field made valid UTF-8, and
// whether body is of a kind whose every field then survives a JSON round
// trip unchanged, so the driver may fold the value it holds instead of
// decoding what it stored (projector.View.ApplyWith). A body whose text
// is valid already, as nearly every body is, is returned as it came.
//
// JSON cannot hold invalid UTF-8 (encoding/json would replace it too), so
// the driver records the replaced text, and the value it folds is the
// value stored.
func clean(body any) (any, bool) {
	var c cleaner
	switch b := body.(type) {
	case events.StepDecidedBody:
		// Args is valid UTF-8 or kept as bytes (decidedBody).
		b.Tool, b.CallID, b.Reason = c.text(b.Tool), c.text(b.CallID), c.text(b.Reason)
		b.Policy = c.policy(b.Policy)
		return cleaned(&c, body, b)
	case events.PolicyBody:
		return cleaned(&c, body, *c.policy(&b))
	case events.ObservedBody:
		b.Content = c.text(b.Content)
		return cleaned(&c, body, b)
	case events.InterruptedBody:
		b.Observation = c.observation(b.Observation)
		return cleaned(&c, body, b)
	case events.EndBody:
		b.Detail, b.Result = c.text(b.Detail), c.text(b.Result)
		b.Policy = c.policy(b.Policy)
		b.Observation = c.observation(b.Observation)
		return cleaned(&c, body, b)
	case events.RefusedBody:
		b.Reason, b.Operator = c.text(b.Reason), c.text(b.Operator)
		return cleaned(&c, body, b)
	case events.ExpiredBody, events.RunToolsBody:
		// Ids, and specs whose text Compile held to UTF-8.
		return body, true
	}
	return body, false
}

// cleaned is clean's answer: body as it came when c changed nothing, the
// cleaned value b otherwise (boxed only then).
func cleaned[T any](c *cleaner, body any, b T) (any, bool) {
	if !c.changed {
		return body, true
	}
	return b, true
}

// cleaner makes text valid UTF-8 and remembers whether any was not. What
// it changes behind a pointer it copies first; what it leaves alone it
// hands back as it came.
type cleaner struct{ changed bool }

func (c *cleaner) text(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	c.changed = true
	return strings.ToValidUTF8(s, "\uFFFD")
}

func (c *cleaner) policy(p *events.PolicyBody) *events.PolicyBody {
	if p == nil || utf8.ValidString(p.Reason) && (p.Approval == nil || utf8.ValidString(p.Approval.Kind) && utf8.ValidString(p.Approval.Reason)) {
		return p
	}
	b := *p
	b.Reason = c.text(b.Reason)
	if b.Approval != nil {
		a := *b.Approval
		a.Kind, a.Reason = c.text(a.Kind), c.text(a.Reason)
		b.Approval = &a
	}
	c.changed = true
	return &b
}

func (c *cleaner) observation(o *events.ObservedBody) *events.ObservedBody {
	if o == nil || utf8.ValidString(o.Content) {
		return o
	}
	cp := *o
	cp.Content = c.text(cp.Content)
	return &cp
}
