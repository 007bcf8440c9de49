package visible

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, é, 世界, 😀", "plain text, é, 世界, 😀"},
		{"two\nlines\tand a tab", "two\nlines\tand a tab"},
		{"\x1b[8mhidden", `\u001b[8mhidden`},
		{"\u009b29Dalice", `\u009b29Dalice`},
		{"over\rwrite", `over\u000dwrite`},
		{"\x00\x07\x7f", `\u0000\u0007\u007f`},
		{"pay \u202e0001\u202c", `pay \u202e0001\u202c`},
		{"\u2066isolate\u2069 \u200e\u200f\u061c", `\u2066isolate\u2069 \u200e\u200f\u061c`},
		{"zero\u200bwidth\u200d\u2060\ufeff", `zero\u200bwidth\u200d\u2060\ufeff`},
		{"soft\u00adhyphen", `soft\u00adhyphen`},
		{"tag \U000e0041\U000e007f", `tag \udb40\udc41\udb40\udc7f`},
		{"sep\u2028\u2029", `sep\u2028\u2029`},
		{"variation \ufe0f\U000e0100", `variation \ufe0f\udb40\udd00`},
		{"bad \xff\xc3", `bad \xff\xc3`},
	} {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestString_SameJSON: inside a JSON string, an escaped rune is the same
// string again, so a JSON output passed through the package decodes as it
// would have.
func TestString_SameJSON(t *testing.T) {
	in := map[string]string{"amount": "\u202e0001\u202c", "note": "a\u200bb\u009bc\U000e0041"}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	shown := String(string(raw))
	if strings.ContainsRune(shown, '\u202e') || strings.ContainsRune(shown, '\u009b') {
		t.Fatalf("escaped JSON still holds hidden characters: %q", shown)
	}
	var back map[string]string
	if err := json.Unmarshal([]byte(shown), &back); err != nil {
		t.Fatalf("escaped JSON %q does not decode: %v", shown, err)
	}
	if back["amount"] != in["amount"] || back["note"] != in["note"] {
		t.Errorf("escaped JSON decodes to %q, want %q", back, in)
	}
}

// TestWriter_SplitsAnywhere: whatever the writes' boundaries, a Writer
// passes on what String makes of the whole (which holds no right-to-left
// character, which only a Writer escapes), characters split between
// writes included.
func TestWriter_SplitsAnywhere(t *testing.T) {
	whole := "a\u202eé世😀\x1b[1m\u009b\xff\U000e0041z\u200b\n"
	want := String(whole)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		var out bytes.Buffer
		w := NewWriter(&out)
		rest := []byte(whole)
		for len(rest) > 0 {
			n := 1 + rng.IntN(min(len(rest), 4))
			if k, err := w.Write(rest[:n]); err != nil || k != n {
				t.Fatalf("round %d: Write = %d, %v", round, k, err)
			}
			rest = rest[n:]
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Fatalf("round %d: wrote %q, want %q", round, out.String(), want)
		}
	}
	// A character never finished is escaped at Flush.
	var out bytes.Buffer
	w := NewWriter(&out)
	w.Write([]byte("x\xe4\xb8"))
	if out.String() != "x" {
		t.Errorf("before Flush: %q, want the unfinished character held", out.String())
	}
	w.Flush()
	if out.String() != `x\xe4\xb8` {
		t.Errorf("after Flush: %q", out.String())
	}
}

// TestWriter_RightToLeftForATerminal: a terminal that lays text out in
// both directions reorders right-to-left letters and the numbers beside
// them, and has no override a page can set: the Writer (for terminals)
// escapes every right-to-left character (Hebrew and Arabic letters,
// Arabic-Indic digits), so what it prints reads in the order of its
// bytes; as JSON it is the same string again. String (for pages, which
// set a left-to-right override) leaves them, as it leaves Latin and CJK.
func TestWriter_RightToLeftForATerminal(t *testing.T) {
	in := `{"pay":["אבי",5,"دني",1000000,"٣"]}`
	var b bytes.Buffer
	w := NewWriter(&b)
	if _, err := w.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := `{"pay":["\u05d0\u05d1\u05d9",5,"\u062f\u0646\u064a",1000000,"\u0663"]}`
	if b.String() != want {
		t.Errorf("Writer: %s, want %s", b.String(), want)
	}
	var back, orig map[string][]any
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(in), &orig)
	if !reflect.DeepEqual(back, orig) {
		t.Errorf("escaped JSON decodes to %v, want %v", back, orig)
	}
	if got := String(in); got != in {
		t.Errorf("String changed right-to-left text: %s", got)
	}
	if got := String("é 世界 ×"); got != "é 世界 ×" {
		t.Errorf("String changed left-to-right text: %q", got)
	}
}

// TestASCII_EveryCharacterOutsideASCII: a request that passes for another
// (a Cyrillic "а" in "аlice", a full-width digit) reads differently with
// every character outside ASCII escaped, and is the same JSON string
// again; a request in plain ASCII is shown as it is.
func TestASCII_EveryCharacterOutsideASCII(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		non      bool
	}{
		{`{"to":"alice@example.com"}`, `{"to":"alice@example.com"}`, false},
		{`{"to":"аlice@exаmple.com"}`, `{"to":"\u0430lice@ex\u0430mple.com"}`, true},
		{"１0 \U0001d7cf", `\uff110 \ud835\udfcf`, true},
		{"tab\tand\nline \x1b", "tab\tand\nline \\u001b", false},
		{"bad \xff", `bad \xff`, true},
	} {
		if got := ASCII(tc.in); got != tc.want {
			t.Errorf("ASCII(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := NonASCII(tc.in); got != tc.non {
			t.Errorf("NonASCII(%q) = %v, want %v", tc.in, got, tc.non)
		}
	}
	var a, b map[string]string
	if err := json.Unmarshal([]byte(ASCII(`{"to":"аlice"}`)), &a); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(`{"to":"аlice"}`), &b)
	if a["to"] != b["to"] {
		t.Errorf("escaped JSON decodes to %q, want %q", a["to"], b["to"])
	}
}
