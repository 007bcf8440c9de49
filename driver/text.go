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

// valid returns s with any invalid UTF-8 replaced by U+FFFD. JSON cannot
// hold invalid UTF-8 (encoding/json would replace it too), so the driver
// records the replaced text, and the value it folds is the value stored.
func valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// clean returns body with every free-text field made valid UTF-8, and
// whether body is of a kind whose every field then survives a JSON round
// trip unchanged, so the driver may fold the value it holds instead of
// decoding what it stored (projector.View.ApplyWith). A body whose text
// is valid already, as nearly every body is, is returned as it came.
func clean(body any) (any, bool) {
	var c cleaner
	switch b := body.(type) {
	case events.StepDecidedBody:
		// Args is valid UTF-8 or kept as bytes (decidedBody).
		b.Tool, b.CallID, b.Reason = c.valid(b.Tool), c.valid(b.CallID), c.valid(b.Reason)
		if b.Policy != nil {
			if p, changed := cleanPolicy(*b.Policy); changed {
				b.Policy, c.changed = &p, true
			}
		}
		if !c.changed {
			return body, true
		}
		return b, true
	case events.PolicyBody:
		p, changed := cleanPolicy(b)
		c.changed = changed
		if !c.changed {
			return body, true
		}
		return p, true
	case events.ObservedBody:
		b.Content = c.valid(b.Content)
		if !c.changed {
			return body, true
		}
		return b, true
	case events.InterruptedBody:
		if b.Observation != nil {
			if o := *b.Observation; !utf8.ValidString(o.Content) {
				o.Content = c.valid(o.Content)
				b.Observation = &o
			}
		}
		if !c.changed {
			return body, true
		}
		return b, true
	case events.EndBody:
		b.Detail, b.Result = c.valid(b.Detail), c.valid(b.Result)
		if b.Policy != nil {
			if p, changed := cleanPolicy(*b.Policy); changed {
				b.Policy, c.changed = &p, true
			}
		}
		if b.Observation != nil {
			if o := *b.Observation; !utf8.ValidString(o.Content) {
				o.Content = c.valid(o.Content)
				b.Observation = &o
			}
		}
		if !c.changed {
			return body, true
		}
		return b, true
	case events.RefusedBody:
		b.Reason, b.Operator = c.valid(b.Reason), c.valid(b.Operator)
		if !c.changed {
			return body, true
		}
		return b, true
	case events.ExpiredBody, events.RunToolsBody:
		// Ids, and specs whose text Compile held to UTF-8.
		return body, true
	}
	return body, false
}

// cleanPolicy is clean for a policy result, and whether it changed.
func cleanPolicy(b events.PolicyBody) (events.PolicyBody, bool) {
	var c cleaner
	b.Reason = c.valid(b.Reason)
	if b.Approval != nil && !(utf8.ValidString(b.Approval.Kind) && utf8.ValidString(b.Approval.Reason)) {
		a := *b.Approval
		a.Kind, a.Reason = c.valid(a.Kind), c.valid(a.Reason)
		b.Approval = &a
	}
	return b, c.changed
}

// cleaner makes text valid and remembers whether any was not.
type cleaner struct{ changed bool }

func (c *cleaner) valid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	c.changed = true
	return strings.ToValidUTF8(s, "\uFFFD")
}
