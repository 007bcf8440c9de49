package policy_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

func TestValidateID(t *testing.T) {
	tests := []struct {
		name string
		id   string
		ok   bool
	}{
		{"empty (unidentified)", "", true},
		{"plain", "my-rules v3", true},
		{"unicode", "règles v3 — 日本", true},
		{"hash", "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", true},
		{"at the limit", strings.Repeat("a", policy.MaxIDLen), true},
		{"multibyte at the limit", strings.Repeat("é", policy.MaxIDLen/2), true},
		{"one byte over", strings.Repeat("a", policy.MaxIDLen+1), false},
		{"multibyte over in bytes", strings.Repeat("é", policy.MaxIDLen/2+1), false},
		{"invalid UTF-8", "rules \xff", false},
		{"truncated rune", "rules \xc3", false},
		{"newline", "rules\nv3", false},
		{"tab", "rules\tv3", false},
		{"NUL", "rules\x00", false},
		{"DEL", "rules\x7f", false},
		{"C1 control", "rules\u0085", false},
		{"escape sequence", "\x1b[31mred", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := policy.ValidateID(tt.id)
			if tt.ok && err != nil {
				t.Errorf("ValidateID = %v, want nil", err)
			}
			if !tt.ok && !errors.Is(err, policy.ErrBadID) {
				t.Errorf("ValidateID = %v, want %v", err, policy.ErrBadID)
			}
		})
	}
}

// allowAll is a policy with no identity of its own.
type allowAll struct{ calls *int }

func (p allowAll) Evaluate(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
	*p.calls++
	return policy.Ruling{Outcome: events.Allow, Reason: "all"}, nil
}

// identified names itself.
type identified struct{ allowAll }

func (identified) PolicyID() string { return "inner v1" }

var (
	_ policy.Policy           = allowAll{}
	_ policy.IdentifiedPolicy = identified{}
)

func TestID_UnidentifiedIsEmpty(t *testing.T) {
	if got := policy.ID(allowAll{}); got != "" {
		t.Errorf("ID(unidentified) = %q, want \"\"", got)
	}
	if got := policy.ID(identified{}); got != "inner v1" {
		t.Errorf("ID(identified) = %q, want %q", got, "inner v1")
	}
}

func TestWithID_NamesAndDelegates(t *testing.T) {
	calls := 0
	p := policy.WithID(allowAll{calls: &calls}, "rules v2")
	if got := p.PolicyID(); got != "rules v2" {
		t.Errorf("PolicyID() = %q, want %q", got, "rules v2")
	}
	if got := policy.ID(p); got != "rules v2" {
		t.Errorf("ID(WithID(p)) = %q, want %q", got, "rules v2")
	}
	dec, err := p.Evaluate(t.Context(), policy.Request{Tool: events.ToolSpec{Name: "x"}}, projector.View{})
	if err != nil || dec.Outcome != events.Allow || dec.Reason != "all" {
		t.Errorf("Evaluate = %+v, %v, want the wrapped policy's allow", dec, err)
	}
	if calls != 1 {
		t.Errorf("wrapped policy called %d times, want 1", calls)
	}
}

func TestWithID_OverridesAnInnerID(t *testing.T) {
	calls := 0
	p := policy.WithID(identified{allowAll{calls: &calls}}, "outer v2")
	if got := policy.ID(p); got != "outer v2" {
		t.Errorf("ID = %q, want the outer %q", got, "outer v2")
	}
}

// TestWithID_DoesNotValidate: WithID accepts any string; the driver refuses
// an unusable id when it is built (driver.TestNew_RejectsBadPolicyID).
func TestWithID_DoesNotValidate(t *testing.T) {
	p := policy.WithID(policy.DefaultSideEffects(), "bad\nid")
	if err := policy.ValidateID(policy.ID(p)); !errors.Is(err, policy.ErrBadID) {
		t.Errorf("ValidateID(%q) = %v, want %v", policy.ID(p), err, policy.ErrBadID)
	}
}
