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
// decoding what it stored (projector.View.ApplyWith).
func clean(body any) (any, bool) {
	switch b := body.(type) {
	case events.StepDecidedBody:
		// Args is valid UTF-8 or kept as bytes (decidedBody).
		b.Tool, b.CallID, b.Reason = valid(b.Tool), valid(b.CallID), valid(b.Reason)
		if b.Policy != nil {
			p, _ := clean(*b.Policy)
			pb := p.(events.PolicyBody)
			b.Policy = &pb
		}
		return b, true
	case events.PolicyBody:
		b.Reason = valid(b.Reason)
		if b.Approval != nil {
			a := *b.Approval
			a.Kind, a.Reason = valid(a.Kind), valid(a.Reason)
			b.Approval = &a
		}
		return b, true
	case events.ObservedBody:
		b.Content = valid(b.Content)
		return b, true
	case events.InterruptedBody:
		if b.Observation != nil {
			o := *b.Observation
			o.Content = valid(o.Content)
			b.Observation = &o
		}
		return b, true
	case events.EndBody:
		b.Detail, b.Result = valid(b.Detail), valid(b.Result)
		if b.Policy != nil {
			p, _ := clean(*b.Policy)
			pb := p.(events.PolicyBody)
			b.Policy = &pb
		}
		if b.Observation != nil {
			o := *b.Observation
			o.Content = valid(o.Content)
			b.Observation = &o
		}
		return b, true
	case events.RefusedBody:
		b.Reason, b.Operator = valid(b.Reason), valid(b.Operator)
		return b, true
	case events.ExpiredBody, events.RunToolsBody:
		// Ids, and specs whose text Compile held to UTF-8.
		return b, true
	}
	return body, false
}
