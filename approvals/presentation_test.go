package approvals_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// publication is what a publishing policy shows its operator.
type publication struct {
	Branch string   `json:"branch"`
	Base   string   `json:"base"`
	Files  []string `json:"files"`
}

func withPresentation(p string) projector.Approval {
	a := projector.Approval{ApprovalRequest: events.ApprovalRequest{ID: "01JAPPROVALPRES", Kind: "publication"}}
	if p != "<absent>" {
		a.Presentation = json.RawMessage(p)
	}
	return a
}

func TestDecodePresentation_RoundTripsNeedApproval(t *testing.T) {
	want := publication{Branch: "feature/x", Base: "main", Files: []string{"a.go", "b && c.go"}}
	dec, err := policy.NeedApproval("publication", "publishing needs an operator", map[string]string{"artifact": "a1"}, want)
	if err != nil {
		t.Fatalf("NeedApproval: %v", err)
	}
	a := withPresentation(string(dec.Approval.Presentation))
	got, err := approvals.DecodePresentation[publication](a)
	if err != nil {
		t.Fatalf("DecodePresentation: %v", err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("DecodePresentation = %+v, want %+v", got, want)
	}
}

func TestDecodePresentation_OtherTargets(t *testing.T) {
	a := withPresentation(`{"branch":"x","n":1}`)
	m, err := approvals.DecodePresentation[map[string]any](a)
	if err != nil || m["branch"] != "x" {
		t.Errorf("DecodePresentation[map] = %v, %v, want branch x", m, err)
	}
	raw, err := approvals.DecodePresentation[json.RawMessage](a)
	if err != nil || string(raw) != `{"branch":"x","n":1}` {
		t.Errorf("DecodePresentation[RawMessage] = %s, %v, want the bytes", raw, err)
	}
	// Members T has no field for are ignored, as encoding/json does.
	p, err := approvals.DecodePresentation[publication](a)
	if err != nil || p.Branch != "x" {
		t.Errorf("DecodePresentation[publication] = %+v, %v, want branch x", p, err)
	}
}

func TestDecodePresentation_NoPresentation(t *testing.T) {
	for _, p := range []string{"<absent>", "", "  \n", "null", "{}", " { } "} {
		t.Run(p, func(t *testing.T) {
			a := withPresentation(p)
			got, err := approvals.DecodePresentation[publication](a)
			if !errors.Is(err, approvals.ErrNoPresentation) {
				t.Fatalf("DecodePresentation(%q) = %v, want %v", p, err, approvals.ErrNoPresentation)
			}
			if errors.Is(err, approvals.ErrBadPresentation) {
				t.Errorf("DecodePresentation(%q) = %v, also %v, want only %v", p, err, approvals.ErrBadPresentation, approvals.ErrNoPresentation)
			}
			if got.Branch != "" || got.Files != nil {
				t.Errorf("DecodePresentation(%q) value = %+v, want the zero value", p, got)
			}
			if !strings.Contains(err.Error(), a.ID) {
				t.Errorf("error %q does not name approval %s", err, a.ID)
			}
		})
	}
}

// TestDecodePresentation_NilBecomesNone ties the two ends together: a
// policy's nil presentation is recorded as {} and reads back as none.
func TestDecodePresentation_NilBecomesNone(t *testing.T) {
	dec, err := policy.NeedApproval("publication", "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = approvals.DecodePresentation[publication](withPresentation(string(dec.Approval.Presentation)))
	if !errors.Is(err, approvals.ErrNoPresentation) {
		t.Errorf("DecodePresentation(NeedApproval's nil) = %v, want %v", err, approvals.ErrNoPresentation)
	}
}

func TestDecodePresentation_BadPresentation(t *testing.T) {
	tests := []struct {
		name  string
		p     string
		cause error
	}{
		{"repeated key", `{"branch":"a","branch":"b"}`, jsonform.ErrDuplicateKey},
		{"invalid UTF-8", "{\"branch\":\"\xff\"}", jsonform.ErrUTF8},
		{"too deep", strings.Repeat("[", 300) + strings.Repeat("]", 300), jsonform.ErrDepth},
		{"lone surrogate", `{"branch":"\ud800"}`, jsonform.ErrLoneSurrogate},
		{"not JSON", `{"branch":`, jsonform.ErrSyntax},
		{"two values", `{} {}`, jsonform.ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := withPresentation(tt.p)
			_, err := approvals.DecodePresentation[publication](a)
			if !errors.Is(err, approvals.ErrBadPresentation) {
				t.Fatalf("DecodePresentation = %v, want %v", err, approvals.ErrBadPresentation)
			}
			if !errors.Is(err, tt.cause) {
				t.Errorf("DecodePresentation = %v, want it to wrap %v", err, tt.cause)
			}
			var je *jsonform.Error
			if !errors.As(err, &je) {
				t.Errorf("DecodePresentation = %v, want a *jsonform.Error in the chain", err)
			}
			if !strings.Contains(err.Error(), a.ID) {
				t.Errorf("error %q does not name approval %s", err, a.ID)
			}
		})
	}
}

func TestDecodePresentation_WrongShape(t *testing.T) {
	tests := []struct{ name, p string }{
		{"field of another type", `{"branch":42}`},
		{"array for an object", `["a"]`},
		{"string for an object", `"main"`},
		{"files not a list", `{"files":"a.go"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := withPresentation(tt.p)
			got, err := approvals.DecodePresentation[publication](a)
			if !errors.Is(err, approvals.ErrBadPresentation) {
				t.Fatalf("DecodePresentation(%s) = %v, want %v", tt.p, err, approvals.ErrBadPresentation)
			}
			var te *json.UnmarshalTypeError
			if !errors.As(err, &te) {
				t.Errorf("DecodePresentation(%s) = %v, want a *json.UnmarshalTypeError in the chain", tt.p, err)
			}
			if got.Branch != "" || got.Files != nil {
				t.Errorf("DecodePresentation(%s) value = %+v, want the zero value on error", tt.p, got)
			}
			for _, want := range []string{a.ID, "publication"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func ExampleDecodePresentation() {
	dec, _ := policy.NeedApproval("publication", "publishing needs an operator",
		map[string]any{"artifact": "a1", "hash": "9f86d081"},
		map[string]any{"branch": "feature/x", "base": "main", "files": []string{"a.go"}})
	a := projector.Approval{ApprovalRequest: events.ApprovalRequest{
		ID: "01JEXAMPLE", Kind: dec.Approval.Kind, Presentation: dec.Approval.Presentation,
	}}

	pres, err := approvals.DecodePresentation[publication](a)
	fmt.Println(pres.Branch, "onto", pres.Base, pres.Files, err)

	a.Presentation = json.RawMessage(`{}`)
	_, err = approvals.DecodePresentation[publication](a)
	fmt.Println(errors.Is(err, approvals.ErrNoPresentation), err)
	// Output:
	// feature/x onto main [a.go] <nil>
	// true approval 01JEXAMPLE (publication): approval has no presentation: presentation is {}
}
