package jsonform

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

// fuzzSeeds covers each refusal and a spread of valid documents.
var fuzzSeeds = []string{
	// refusals
	``, ` `, `1 2`, `{}x`, `tru`, `nul`, `01`, `1.`, `-`, `1e`, `1e+`, `+1`, `.5`,
	`"abc`, "\"a\nb\"", `"\x"`, `"\u12"`, `"\u12`, "\"\xff\"", "\xff",
	"\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\xef\xbb\xbf1",
	nested(MaxDepth + 1), `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"x":{"a":1,"a":2}}`,
	`{"dest":1,"DEST":2}`, "{\"dest\":1,\"de\u017ft\":2}", `{"k":1,"\u212a":2}`,
	`"\ud800"`, `"\udc00"`, `"\ud800\u0041"`, `"\udc00\ud800"`, `"\ud800\u12"`,
	`[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `[1`, `{"a":`,
	// accepted
	`{"a":{"a":1}}`, `"\ud83d\ude00"`, `0`, `-0.5e+10`, `true`, `false`, `null`,
	`"s"`, `{}`, `[]`, nested(MaxDepth), `{"ключ":"значение","😀":[1,2.0,-3e3]}`,
	`{"\ue000":1,"\ud83d\ude00":2}`, `"\"\\\/\b\f\n\r\t\u0000\u001F<>&\u2028"`,
	`{"b":[{"d":1,"c":2}],"a":" x "}`, benchDoc,
}

// FuzzPolicyJSON checks the package's invariants on arbitrary input:
// Check never panics and is never laxer than encoding/json; every accepted
// document canonicalizes, the canonical form is accepted, is a fixed point,
// is no longer than the input and decodes to the same value.
func FuzzPolicyJSON(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Validate(b)
		if err != nil {
			checkRefusal(t, b, err)
			return
		}
		if !json.Valid(b) {
			t.Fatalf("Check accepted %q, which encoding/json rejects", b)
		}
		c, err := PolicyJSON(b)
		if err != nil {
			t.Fatalf("Check accepted %q but PolicyJSON failed: %v", b, err)
		}
		if err := Validate(c); err != nil {
			t.Fatalf("canonical form %q of %q fails Check: %v", c, b, err)
		}
		cc, err := PolicyJSON(c)
		if err != nil || !bytes.Equal(cc, c) {
			t.Fatalf("PolicyJSON not idempotent: %q -> %q (%v)", c, cc, err)
		}
		if len(c) > len(b) {
			t.Fatalf("canonical form %q longer than input %q", c, b)
		}
		if !Equal(b, c) {
			t.Fatalf("Equal(%q, %q) = false", b, c)
		}
		if a, z := decode(t, b), decode(t, c); !reflect.DeepEqual(a, z) {
			t.Fatalf("meaning changed: %q decodes to %#v, canonical %q to %#v", b, a, c, z)
		}
		checkCanonicalSpelling(t, c)
		checkKeyOrder(t, c)
	})
}

// checkRefusal verifies the shape of an error from Check and that
// PolicyJSON refuses the same way.
func checkRefusal(t *testing.T, b []byte, err error) {
	t.Helper()
	var je *Error
	if !errors.As(err, &je) {
		t.Fatalf("Check(%q) returned %T, want *Error", b, err)
	}
	if je.Offset < 0 || je.Offset > len(b) {
		t.Fatalf("Check(%q): offset %d out of range", b, je.Offset)
	}
	known := false
	for _, s := range []error{ErrSyntax, ErrUTF8, ErrDepth, ErrDuplicateKey, ErrFoldedKey, ErrLoneSurrogate} {
		known = known || errors.Is(err, s)
	}
	if !known || je.Reason == "" {
		t.Fatalf("Check(%q): unexpected error %v", b, err)
	}
	if je.Pointer != "" && !strings.HasPrefix(je.Pointer, "/") {
		t.Fatalf("Check(%q): bad pointer %q", b, je.Pointer)
	}
	if _, perr := PolicyJSON(b); perr == nil || perr.Error() != err.Error() {
		t.Fatalf("PolicyJSON(%q) = %v, Check gave %v", b, perr, err)
	}
	if Equal(b, b) {
		t.Fatalf("Equal accepted refused input %q", b)
	}
}

// decode reads b with encoding/json, keeping numbers as written.
func decode(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("encoding/json cannot decode %q: %v", b, err)
	}
	return v
}

// checkCanonicalSpelling verifies that c has no whitespace outside strings
// and no escape other than the ones JSON requires, in their short form.
func checkCanonicalSpelling(t *testing.T, c []byte) {
	t.Helper()
	inString := false
	for i := 0; i < len(c); i++ {
		switch ch := c[i]; {
		case !inString && (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'):
			t.Fatalf("whitespace at %d in canonical %q", i, c)
		case ch == '"':
			inString = !inString
		case inString && ch == '\\':
			i++
			switch c[i] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
			case 'u':
				esc := string(c[i+1 : i+5])
				if !strings.HasPrefix(esc, "00") || esc[2] > '1' || strings.ToLower(esc) != esc ||
					slices.Contains([]string{"0008", "0009", "000a", "000c", "000d"}, esc) {
					t.Fatalf("unneeded escape \\u%s at %d in canonical %q", esc, i, c)
				}
				i += 4
			default:
				t.Fatalf("unneeded escape at %d in canonical %q", i, c)
			}
		}
	}
}

// checkKeyOrder verifies, independently of compareKeys, that every object
// in c lists its keys in strictly increasing UTF-16 code unit order.
func checkKeyOrder(t *testing.T, c []byte) {
	t.Helper()
	type frame struct {
		obj, wantKey, seen bool
		last               []uint16
	}
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(c))
	dec.UseNumber() // numbers such as 1e700 do not fit a float64
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("encoding/json cannot tokenize canonical %q: %v", c, err)
		}
		if n := len(stack); n > 0 && stack[n-1].wantKey {
			if key, ok := tok.(string); ok {
				f := &stack[n-1]
				units := utf16.Encode([]rune(key))
				if f.seen && slices.Compare(f.last, units) >= 0 {
					t.Fatalf("key %q out of order in canonical %q", key, c)
				}
				f.last, f.seen, f.wantKey = units, true, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			stack = append(stack, frame{obj: tok == json.Delim('{'), wantKey: tok == json.Delim('{')})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A whole value ended; an enclosing object expects a key next.
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true
		}
	}
}
