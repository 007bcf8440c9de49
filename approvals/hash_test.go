package approvals_test

import (
	"testing"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
)

// hashInput is everything the approval hash binds.
type hashInput struct {
	kind         string
	capability   string
	presentation string
	tool         events.ToolSpec
	args         string
}

func (in hashInput) hash() string {
	return approvals.Hash(in.kind, []byte(in.capability), []byte(in.presentation), in.tool, []byte(in.args))
}

// base is the known-answer input of docs/adr/0004-approval-hash.md.
func base() hashInput {
	return hashInput{
		kind:         "publication",
		capability:   `{"artifact":"a1","hash":"9f86d081"}`,
		presentation: `{"base":"main","branch":"feature/x","files":["café.go"]}`,
		tool: events.ToolSpec{
			Name: "publish",
			// SHA-256 of "publish", standing in for a tool spec hash.
			Hash:       "a5d47a4311d759db69e576d9eedd6a02fcfd9cd214129fa8492ee1e9c7343def",
			SideEffect: events.RemoteMutation,
		},
		args: `{"branch":"feature/x","remote":"origin"}`,
	}
}

// knownAnswer is the SHA-256 of the netstring encoding
//
//	19:arbiter.approval.v1,11:publication,35:{"artifact":"a1","hash":"9f86d081"},57:{"base":"main","branch":"feature/x","files":["café.go"]},7:publish,64:a5d47a4311d759db69e576d9eedd6a02fcfd9cd214129fa8492ee1e9c7343def,40:{"branch":"feature/x","remote":"origin"},
//
// computed independently (Python's hashlib) and written down in
// docs/adr/0004-approval-hash.md, so another implementation can check itself
// against it. Lengths count bytes: "é" is two.
const knownAnswer = "3b2652ed7e6578da225cd8ce1e9d2d597e045baa6ae27cb4724f5dbe71266796"

func TestHash_KnownAnswer(t *testing.T) {
	if got := base().hash(); got != knownAnswer {
		t.Errorf("Hash(known-answer input) = %s, want %s", got, knownAnswer)
	}
}

func TestHash_Deterministic(t *testing.T) {
	in := base()
	first := in.hash()
	for i := 0; i < 100; i++ {
		if got := in.hash(); got != first {
			t.Fatalf("hash %d = %s, want %s (same input)", i, got, first)
		}
	}
	// Equal inputs in fresh buffers hash the same: nothing depends on where
	// the bytes live.
	cp := hashInput{kind: string([]byte(in.kind)), capability: string([]byte(in.capability)),
		presentation: string([]byte(in.presentation)), tool: in.tool, args: string([]byte(in.args))}
	if got := cp.hash(); got != first {
		t.Errorf("hash of a copy = %s, want %s", got, first)
	}
}

func TestHash_ChangesWithEveryBoundField(t *testing.T) {
	want := base().hash()
	tests := []struct {
		name   string
		change func(*hashInput)
	}{
		{"kind", func(in *hashInput) { in.kind = "scope_expansion" }},
		{"kind case", func(in *hashInput) { in.kind = "Publication" }},
		{"capability", func(in *hashInput) { in.capability = `{"artifact":"a2","hash":"9f86d081"}` }},
		{"capability one byte", func(in *hashInput) { in.capability = `{"artifact":"a1","hash":"9f86d082"}` }},
		{"presentation", func(in *hashInput) { in.presentation = `{"base":"main","branch":"feature/y","files":["café.go"]}` }},
		{"presentation empty", func(in *hashInput) { in.presentation = `{}` }},
		{"tool name", func(in *hashInput) { in.tool.Name = "publish2" }},
		{"tool spec hash", func(in *hashInput) {
			in.tool.Hash = "b5d47a4311d759db69e576d9eedd6a02fcfd9cd214129fa8492ee1e9c7343def"
		}},
		{"tool spec hash absent", func(in *hashInput) { in.tool.Hash = "" }},
		{"args", func(in *hashInput) { in.args = `{"branch":"feature/x","remote":"evil"}` }},
		{"args empty object", func(in *hashInput) { in.args = `{}` }},
		{"args absent", func(in *hashInput) { in.args = `` }},
	}
	seen := map[string]string{want: "base"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			tt.change(&in)
			got := in.hash()
			if got == want {
				t.Fatalf("hash unchanged (%s) after changing %s", got, tt.name)
			}
			if other, dup := seen[got]; dup {
				t.Errorf("hash after changing %s equals hash after changing %s: %s", tt.name, other, got)
			}
			seen[got] = tt.name
		})
	}
}

// TestHash_SpecBoundThroughItsHash shows what of a tool spec the approval
// hash binds: its name and its spec hash. The spec hash covers the schema,
// description, class and timeout (driver.SpecHash), so those fields
// count only through it.
func TestHash_SpecBoundThroughItsHash(t *testing.T) {
	want := base().hash()
	in := base()
	in.tool.Description = "a different description"
	in.tool.SideEffect = events.ReadOnly
	in.tool.Schema = []byte(`{"type":"object"}`)
	if got := in.hash(); got != want {
		t.Errorf("hash = %s after changing fields the spec hash covers, want %s (bound through tool.Hash)", got, want)
	}
}

// TestHash_NetstringBoundaries moves bytes across the boundary between two
// neighbouring fields. Plain concatenation would hash these the same; the
// length prefixes keep them apart.
func TestHash_NetstringBoundaries(t *testing.T) {
	tests := []struct {
		name string
		a, b func(*hashInput)
	}{
		{"kind|capability",
			func(in *hashInput) { in.kind, in.capability = "ab", "c" },
			func(in *hashInput) { in.kind, in.capability = "a", "bc" }},
		{"capability|presentation",
			func(in *hashInput) { in.capability, in.presentation = `{"a":1}1`, `{}` },
			func(in *hashInput) { in.capability, in.presentation = `{"a":1}`, `1{}` }},
		{"presentation|tool name",
			func(in *hashInput) { in.presentation, in.tool.Name = `{}x`, "send" },
			func(in *hashInput) { in.presentation, in.tool.Name = `{}`, "xsend" }},
		{"tool name|tool hash",
			func(in *hashInput) { in.tool.Name, in.tool.Hash = "send1", "23" },
			func(in *hashInput) { in.tool.Name, in.tool.Hash = "send", "123" }},
		{"tool hash|args",
			func(in *hashInput) { in.tool.Hash, in.args = "abc{", `}` },
			func(in *hashInput) { in.tool.Hash, in.args = "abc", `{}` }},
		{"separator inside a field",
			func(in *hashInput) { in.kind, in.capability = "a,1:b", "c" },
			func(in *hashInput) { in.kind, in.capability = "a", "b,1:c" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, y := base(), base()
			tt.a(&x)
			tt.b(&y)
			if x.hash() == y.hash() {
				t.Errorf("moving a byte across %s kept the hash %s", tt.name, x.hash())
			}
		})
	}
}
