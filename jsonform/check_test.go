package jsonform

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// nested returns n arrays nested around 1.
func nested(n int) string {
	return strings.Repeat("[", n) + "1" + strings.Repeat("]", n)
}

// manyKeys returns an object with n distinct keys of 8 bytes each
// (`"kNN":0,`), followed by extra.
func manyKeys(n int, extra string) string {
	var sb strings.Builder
	sb.WriteString("{")
	for i := range n {
		fmt.Fprintf(&sb, `"k%02d":0,`, i)
	}
	sb.WriteString(extra)
	sb.WriteString("}")
	return sb.String()
}

func TestCheck_Refusals(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    error
		offset  int
		pointer string
	}{
		{"empty input", ``, ErrSyntax, 0, ""},
		{"whitespace only", " \t\r\n", ErrSyntax, 4, ""},
		{"two values", `1 2`, ErrSyntax, 2, ""},
		{"trailing garbage", `{"a":1}x`, ErrSyntax, 7, ""},
		{"trailing comma in array", `[1,]`, ErrSyntax, 3, "/1"},
		{"trailing comma in object", `{"a":1,}`, ErrSyntax, 7, ""},
		{"missing colon", `{"a" 1}`, ErrSyntax, 5, ""},
		{"missing comma", `{"a":1 "b":2}`, ErrSyntax, 7, ""},
		{"unquoted key", `{a:1}`, ErrSyntax, 1, ""},
		{"unclosed array", `[1`, ErrSyntax, 2, ""},
		{"unclosed object", `{"a":1`, ErrSyntax, 6, ""},
		{"bad literal short", `tru`, ErrSyntax, 3, ""},
		{"bad literal byte", `[nul]`, ErrSyntax, 4, "/0"},
		{"bad literal case", `True`, ErrSyntax, 0, ""},
		{"literal with suffix", `truex`, ErrSyntax, 4, ""},
		{"number leading zero", `01`, ErrSyntax, 1, ""},
		{"number negative leading zero", `-012`, ErrSyntax, 2, ""},
		{"number no fraction digits", `1.`, ErrSyntax, 2, ""},
		{"number lone minus", `-`, ErrSyntax, 1, ""},
		{"number no exponent digits", `1e`, ErrSyntax, 2, ""},
		{"number signed exponent no digits", `1e+`, ErrSyntax, 3, ""},
		{"number plus sign", `+1`, ErrSyntax, 0, ""},
		{"number leading dot", `.5`, ErrSyntax, 0, ""},
		{"number hex", `0x10`, ErrSyntax, 1, ""},
		{"number in object", `{"n":1.e5}`, ErrSyntax, 7, "/n"},
		{"unterminated string", `"abc`, ErrSyntax, 4, ""},
		{"unterminated string after escape", `"a\"`, ErrSyntax, 4, ""},
		{"unterminated escape", `"a\`, ErrSyntax, 3, ""},
		{"raw newline in string", "\"a\nb\"", ErrSyntax, 2, ""},
		{"raw nul in string", "[\"\x00\"]", ErrSyntax, 2, "/0"},
		{"raw tab in key", "{\"a\tb\":1}", ErrSyntax, 3, ""},
		{"bad escape x", `"\x41"`, ErrSyntax, 1, ""},
		{"bad escape after escape", `"\n\a"`, ErrSyntax, 3, ""},
		{"short u escape", `"\u12"`, ErrSyntax, 1, ""},
		{"short u escape at end", `"\u12`, ErrSyntax, 1, ""},
		{"non-hex u escape", `"\u12g4"`, ErrSyntax, 1, ""},
		{"invalid utf8 in string", "\"a\xffb\"", ErrUTF8, 2, ""},
		{"invalid utf8 outside string", "\xff", ErrUTF8, 0, ""},
		{"invalid utf8 in array", "[1,\xff]", ErrUTF8, 3, "/1"},
		{"invalid utf8 trailing", "1 \xff", ErrUTF8, 2, ""},
		{"invalid utf8 in key", "{\"\xff\":1}", ErrUTF8, 2, ""},
		{"invalid utf8 after escape", "\"\\n\xfe\"", ErrUTF8, 3, ""},
		{"overlong encoding", "\"\xc0\xaf\"", ErrUTF8, 1, ""},
		{"truncated sequence", "\"\xe2\x82\"", ErrUTF8, 1, ""},
		{"utf8 encoded surrogate", "\"\xed\xa0\x80\"", ErrUTF8, 1, ""},
		{"above U+10FFFF", "\"\xf4\x90\x80\x80\"", ErrUTF8, 1, ""},
		{"non-ascii outside string", "[é]", ErrSyntax, 1, "/0"},
		{"byte order mark", "\xef\xbb\xbf{}", ErrSyntax, 0, ""},
		{"depth 257", nested(257), ErrDepth, 256, strings.Repeat("/0", 256)},
		{"depth 257 objects", strings.Repeat(`{"a":`, 257) + "1" + strings.Repeat("}", 257),
			ErrDepth, 5 * 256, strings.Repeat("/a", 256)},
		{"duplicate key", `{"a":1,"a":2}`, ErrDuplicateKey, 7, ""},
		{"duplicate key via escape", `{"a":1,"\u0061":2}`, ErrDuplicateKey, 7, ""},
		{"duplicate key via escaped slash", `{"a/b":1,"a\/b":2}`, ErrDuplicateKey, 9, ""},
		{"duplicate key via surrogate pair", `{"😀":1,"\ud83d\ude00":2}`, ErrDuplicateKey, 10, ""},
		{"duplicate key not adjacent", `{"a":1,"b":2,"a":3}`, ErrDuplicateKey, 13, ""},
		{"duplicate key in nested object", `{"x":{"a":1,"b":2,"a":3}}`, ErrDuplicateKey, 18, "/x"},
		{"duplicate key in array element", `[{"a":1},{"a":1,"a":2}]`, ErrDuplicateKey, 16, "/1"},
		{"duplicate key in large object", manyKeys(40, `"k07":0`), ErrDuplicateKey, 1 + 40*8, ""},
		{"duplicate empty key", `{"":1,"":2}`, ErrDuplicateKey, 6, ""},
		{"keys equal under ASCII case folding", `{"dest":1,"DEST":2}`, ErrFoldedKey, 10, ""},
		{"keys equal under Unicode folding (long s)", `{"dest":"acct-ops","deſt":"acct-mallory"}`, ErrFoldedKey, 19, ""},
		{"long s written raw", "{\"dest\":1,\"de\u017ft\":2}", ErrFoldedKey, 10, ""},
		{"Kelvin sign folds to k", "{\"k\":1,\"\u212a\":2}", ErrFoldedKey, 7, ""},
		{"folded key in large object", manyKeys(40, `"K07":0`), ErrFoldedKey, 1 + 40*8, ""},
		{"folded key nested", `{"x":{"Amount":1,"amount":2}}`, ErrFoldedKey, 17, "/x"},
		{"pointer escaping", `{"a/b":{"~":[tru]}}`, ErrSyntax, 16, "/a~1b/~0/0"},
		{"lone high surrogate", `"\ud800"`, ErrLoneSurrogate, 1, ""},
		{"lone high surrogate at end", `"\ud800`, ErrLoneSurrogate, 1, ""},
		{"lone low surrogate", `"\udc00"`, ErrLoneSurrogate, 1, ""},
		{"high then non-surrogate escape", `"\ud800\u0041"`, ErrLoneSurrogate, 1, ""},
		{"high then literal char", `"\ud800A"`, ErrLoneSurrogate, 1, ""},
		{"high then high", `"\ud800\ud800"`, ErrLoneSurrogate, 1, ""},
		{"high then bad escape", `"\ud800\u12"`, ErrSyntax, 7, ""},
		{"reversed pair", `"\udc00\ud800"`, ErrLoneSurrogate, 1, ""},
		{"lone surrogate in key", `{"\uDFFF":1}`, ErrLoneSurrogate, 2, ""},
		{"lone surrogate in member", `{"a":"x\ud800y"}`, ErrLoneSurrogate, 7, "/a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate([]byte(tt.in))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Check(%q) = %v, want %v", tt.in, err, tt.want)
			}
			var je *Error
			if !errors.As(err, &je) {
				t.Fatalf("Check(%q) error %T is not *Error", tt.in, err)
			}
			if je.Offset != tt.offset {
				t.Errorf("Offset = %d, want %d (%v)", je.Offset, tt.offset, err)
			}
			if je.Pointer != tt.pointer {
				t.Errorf("Pointer = %q, want %q (%v)", je.Pointer, tt.pointer, err)
			}
			if je.Reason == "" {
				t.Errorf("empty Reason")
			}
			if _, perr := PolicyJSON([]byte(tt.in)); perr == nil || perr.Error() != err.Error() {
				t.Errorf("PolicyJSON error = %v, want %v", perr, err)
			}
		})
	}
}

func TestCheck_Accepts(t *testing.T) {
	accepted := []string{
		`{"a":{"a":1}}`,
		`[{"a":1},{"a":2}]`,
		`{"a":1,"B":2,"a ":3,"\u0061b":4}`,
		`"\ud83d\ude00"`,
		`"\uD83D\uDE00"`,
		`"😀 \u00e9 é \u2028"`,
		"\"\xef\xbf\xbd\"", // a literal U+FFFD is valid UTF-8
		`0`, `-0`, `1.5`, `-1.5e-10`, `1E+2`, `123456789012345678901234567890`,
		`true`, `false`, `null`, `""`, `"s"`, `{}`, `[]`, `[[]]`, `{"":{}}`,
		" \t\r\n{ \"a\" : [ 1 , 2 ] } \n",
		`{"ключ":1,"键":2,"😀":3,"\u00e9":4,"e\u0301":5}`,
		`{"k":"\"\\\/\b\f\n\r\t\u0000\u001f"}`,
		nested(MaxDepth),
		strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth),
		manyKeys(100, `"z":0`),
	}
	for _, in := range accepted {
		if err := Validate([]byte(in)); err != nil {
			t.Errorf("Check(%.60q) = %v, want nil", in, err)
		}
	}
}

func TestError_Format(t *testing.T) {
	err := Validate([]byte(`{"a":{"b":{"x":1,"x":2}}}`))
	want := `json at byte 17 (/a/b): repeated object key "x"`
	if err == nil || err.Error() != want {
		t.Errorf("Error() = %v, want %s", err, want)
	}
	err = Validate([]byte(`1 x`))
	want = `json at byte 2: trailing data after the value: unexpected byte 'x'`
	if err == nil || err.Error() != want {
		t.Errorf("Error() = %v, want %s", err, want)
	}
	err = Validate([]byte(nested(300)))
	if err == nil || !strings.HasSuffix(err.Error(), ": nesting deeper than 256") {
		t.Errorf("Error() = %v, want nesting reason", err)
	}
	if !errors.Is(err, ErrDepth) || errors.Is(err, ErrSyntax) {
		t.Errorf("errors.Is mismatch for %v", err)
	}
	long := `{"` + strings.Repeat("é", 100) + `":1,"` + strings.Repeat("é", 100) + `":2}`
	if err := Validate([]byte(long)); err == nil || !strings.HasSuffix(err.Error(), `é"...`) {
		t.Errorf("long key reason not shortened: %v", err)
	}
}
