package policy_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/policy"
)

func TestNeedApproval_BuildsRequireApproval(t *testing.T) {
	dec, err := policy.NeedApproval("publication", "publishing needs an operator",
		map[string]any{"hash": "9f86", "artifact": "a1"},
		map[string]any{"branch": "feature/x", "base": "main", "files": []string{"a.go"}})
	if err != nil {
		t.Fatalf("NeedApproval: %v", err)
	}
	if dec.Outcome != events.RequireApproval {
		t.Errorf("outcome = %q, want %q", dec.Outcome, events.RequireApproval)
	}
	if dec.Reason != "publishing needs an operator" {
		t.Errorf("reason = %q, want %q", dec.Reason, "publishing needs an operator")
	}
	a := dec.Approval
	if a == nil {
		t.Fatal("approval = nil, want one")
	}
	if a.Kind != "publication" {
		t.Errorf("kind = %q, want publication", a.Kind)
	}
	if got, want := string(a.Capability), `{"artifact":"a1","hash":"9f86"}`; got != want {
		t.Errorf("capability = %s, want %s", got, want)
	}
	if got, want := string(a.Presentation), `{"base":"main","branch":"feature/x","files":["a.go"]}`; got != want {
		t.Errorf("presentation = %s, want %s", got, want)
	}
	if a.ExpiresIn != 0 {
		t.Errorf("expires in = %s, want 0 (the runtime's default)", a.ExpiresIn)
	}
}

func TestNeedApproval_NilBecomesEmptyObject(t *testing.T) {
	tests := []struct {
		name string
		v    any
	}{
		{"nil", nil},
		{"nil RawMessage", json.RawMessage(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec, err := policy.NeedApproval("k", "", tt.v, tt.v)
			if err != nil {
				t.Fatalf("NeedApproval: %v", err)
			}
			if got := string(dec.Approval.Capability); got != `{}` {
				t.Errorf("capability = %s, want {}", got)
			}
			if got := string(dec.Approval.Presentation); got != `{}` {
				t.Errorf("presentation = %s, want {}", got)
			}
		})
	}
}

// TestNeedApproval_TypedNilBecomesEmptyObject holds a nil map or pointer to
// the same rule as an untyped nil: the seed says a nil capability or
// presentation becomes {}.
func TestNeedApproval_TypedNilBecomesEmptyObject(t *testing.T) {
	tests := []struct {
		name string
		v    any
	}{
		{"nil map", map[string]any(nil)},
		{"nil pointer", (*struct{ A int })(nil)},
		{"nil slice", []string(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec, err := policy.NeedApproval("k", "", tt.v, tt.v)
			if err != nil {
				t.Fatalf("NeedApproval: %v", err)
			}
			if got := string(dec.Approval.Capability); got != `{}` {
				t.Errorf("a %s capability: got %s, want {}", tt.name, got)
			}
		})
	}
}

// unmarshalable values: encoding/json refuses them, so NeedApproval must.
func TestNeedApproval_UnmarshalableValueIsAnError(t *testing.T) {
	tests := []struct {
		name string
		v    any
	}{
		{"channel", make(chan int)},
		{"func", func() {}},
		{"map with a channel", map[string]any{"c": make(chan int)}},
		{"complex", complex(1, 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.NeedApproval("k", "", tt.v, nil)
			var ut *json.UnsupportedTypeError
			if !errors.As(err, &ut) {
				t.Errorf("NeedApproval(capability %s) = %v, want a *json.UnsupportedTypeError", tt.name, err)
			}
			_, err = policy.NeedApproval("k", "", nil, tt.v)
			if !errors.As(err, &ut) {
				t.Errorf("NeedApproval(presentation %s) = %v, want a *json.UnsupportedTypeError", tt.name, err)
			}
		})
	}
}

func TestNeedApproval_UnmarshalableValueNamesTheField(t *testing.T) {
	_, err := policy.NeedApproval("publication", "", nil, func() {})
	if err == nil || !strings.Contains(err.Error(), "presentation") || !strings.Contains(err.Error(), "publication") {
		t.Errorf("NeedApproval(presentation func) = %v, want an error naming the kind and the presentation", err)
	}
	_, err = policy.NeedApproval("publication", "", make(chan int), nil)
	if err == nil || !strings.Contains(err.Error(), "capability") {
		t.Errorf("NeedApproval(capability chan) = %v, want an error naming the capability", err)
	}
}

func TestNeedApproval_EmptyKindIsAnError(t *testing.T) {
	if _, err := policy.NeedApproval("", "why", nil, nil); err == nil {
		t.Error("NeedApproval with no kind = nil error, want an error")
	}
}

// TestNeedApproval_RawJSONHeldToTheBoundary hands hand-built JSON that
// encoding/json would let through.
func TestNeedApproval_RawJSONHeldToTheBoundary(t *testing.T) {
	deep := strings.Repeat("[", 300) + strings.Repeat("]", 300)
	tests := []struct {
		name string
		raw  []byte
		want error
	}{
		{"duplicate key", []byte(`{"a":1,"a":2}`), jsonform.ErrDuplicateKey},
		{"duplicate key after unescaping", []byte(`{"a":1,"\u0061":2}`), jsonform.ErrDuplicateKey},
		{"invalid UTF-8", []byte("{\"a\":\"\xff\xfe\"}"), jsonform.ErrUTF8},
		{"depth 300", []byte(deep), jsonform.ErrDepth},
		{"lone surrogate", []byte(`{"a":"\udc00"}`), jsonform.ErrLoneSurrogate},
		{"empty", []byte{}, jsonform.ErrSyntax},
		{"trailing data", []byte(`{} x`), jsonform.ErrSyntax},
	}
	for _, tt := range tests {
		for _, as := range []struct {
			name string
			v    any
		}{{"RawMessage", json.RawMessage(tt.raw)}, {"[]byte", tt.raw}} {
			t.Run(tt.name+"/"+as.name, func(t *testing.T) {
				_, err := policy.NeedApproval("k", "", as.v, nil)
				if !errors.Is(err, tt.want) {
					t.Errorf("NeedApproval(capability) = %v, want %v", err, tt.want)
				}
				_, err = policy.NeedApproval("k", "", nil, as.v)
				if !errors.Is(err, tt.want) {
					t.Errorf("NeedApproval(presentation) = %v, want %v", err, tt.want)
				}
				var je *jsonform.Error
				if !errors.As(err, &je) {
					t.Errorf("NeedApproval(presentation) = %v, want a *jsonform.Error", err)
				}
			})
		}
	}
}

func TestNeedApproval_RawJSONAtDepthLimitAccepted(t *testing.T) {
	atLimit := strings.Repeat("[", jsonform.MaxDepth) + strings.Repeat("]", jsonform.MaxDepth)
	if _, err := policy.NeedApproval("k", "", json.RawMessage(atLimit), nil); err != nil {
		t.Errorf("NeedApproval(depth %d) = %v, want nil", jsonform.MaxDepth, err)
	}
}

// TestNeedApproval_OutputIsPolicyJSON: keys sorted, no insignificant
// whitespace, numbers as written, no HTML escaping, whatever the input form.
func TestNeedApproval_OutputIsPolicyJSON(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"raw with whitespace and order", json.RawMessage(" {\n \"b\" : 1.50 , \"a\" : [ 1e2 ] } "), `{"a":[1e2],"b":1.50}`},
		{"raw with escapes", json.RawMessage(`{"s":"\u0041\u0026\u0026\/"}`), `{"s":"A&&/"}`},
		{"bytes", []byte(`{"z":true,"a":null}`), `{"a":null,"z":true}`},
		{"Go map", map[string]any{"z": "x && y <b>", "a": 1}, `{"a":1,"z":"x && y <b>"}`},
		{"Go struct", struct {
			Z string `json:"z"`
			A int    `json:"a"`
		}{"&", 2}, `{"a":2,"z":"&"}`},
		{"raw null", json.RawMessage(`null`), `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec, err := policy.NeedApproval("k", "", tt.v, tt.v)
			if err != nil {
				t.Fatalf("NeedApproval: %v", err)
			}
			if got := string(dec.Approval.Capability); got != tt.want {
				t.Errorf("capability = %s, want %s", got, tt.want)
			}
			if got := string(dec.Approval.Presentation); got != tt.want {
				t.Errorf("presentation = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestNeedApproval_DoesNotAliasInput: the decision keeps its own bytes, so a
// policy that reuses its buffer cannot change an approval it already gave.
func TestNeedApproval_DoesNotAliasInput(t *testing.T) {
	raw := []byte(`{"a":1}`)
	dec, err := policy.NeedApproval("k", "", json.RawMessage(raw), raw)
	if err != nil {
		t.Fatal(err)
	}
	copy(raw, `{"b":2}`)
	if got := string(dec.Approval.Capability); got != `{"a":1}` {
		t.Errorf("capability = %s after the caller changed its buffer, want {\"a\":1}", got)
	}
	if got := string(dec.Approval.Presentation); got != `{"a":1}` {
		t.Errorf("presentation = %s after the caller changed its buffer, want {\"a\":1}", got)
	}
}
