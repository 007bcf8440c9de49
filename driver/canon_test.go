package driver

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"pgregory.net/rapid"
)

// drawJSON draws the text of a JSON value: nested objects and arrays,
// strings that need escaping, numbers in every form JSON allows.
func drawJSON(t *rapid.T, depth int) string {
	kinds := 6
	if depth > 3 {
		kinds = 4 // no more nesting
	}
	switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
	case 0:
		s := rapid.OneOf(rapid.String(), rapid.SampledFrom([]string{"", "a\"b", `c\d`, "tab\t", "\x01", "<&>", "\u2028", "é日本", "😀"})).Draw(t, "string")
		b, _ := json.Marshal(s)
		return string(b)
	case 1:
		return rapid.SampledFrom([]string{"0", "-0", "12", "-7", "3.25", "1e3", "-2.5E-7", "12345678901234567890123", "0.000001"}).Draw(t, "number")
	case 2:
		return rapid.SampledFrom([]string{"true", "false"}).Draw(t, "bool")
	case 3:
		return "null"
	case 4:
		n := rapid.IntRange(0, 4).Draw(t, "members")
		var b bytes.Buffer
		b.WriteString("{ ")
		for i := range n {
			if i > 0 {
				b.WriteString(" , ")
			}
			k, _ := json.Marshal(rapid.OneOf(rapid.StringMatching(`[a-z]{0,4}`), rapid.String()).Draw(t, "key"))
			b.Write(k)
			b.WriteString(": ")
			b.WriteString(drawJSON(t, depth+1))
		}
		b.WriteString(" }")
		return b.String()
	default:
		n := rapid.IntRange(0, 4).Draw(t, "items")
		var b bytes.Buffer
		b.WriteString("[")
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(drawJSON(t, depth+1))
		}
		b.WriteString("]")
		return b.String()
	}
}

// TestDecodeCanonical_SameAsSchemaDecoder: decoding PolicyJSON directly
// gives exactly what the schema library's own decoder gives.
func TestDecodeCanonical_SameAsSchemaDecoder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		raw := drawJSON(t, 0)
		canon, err := jsonform.PolicyJSON([]byte(raw))
		if err != nil {
			t.Skipf("not PolicyJSON (%v): %s", err, raw)
		}
		want, err := jsonschema.UnmarshalJSON(bytes.NewReader(canon))
		if err != nil {
			t.Fatalf("schema decoder refused %s: %v", canon, err)
		}
		got, err := decodeCanonical(canon)
		if err != nil {
			t.Fatalf("decode %s: %v", canon, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decode %s:\n got %#v\nwant %#v", canon, got, want)
		}
	})
}

// TestDecodeCanonical_RefusesWhatIsNotOneValue: bytes that are not one
// compact value are an error, never a partial value.
func TestDecodeCanonical_RefusesWhatIsNotOneValue(t *testing.T) {
	for _, b := range []string{``, `{`, `[1,`, `{"a"}`, `{"a":1`, `"open`, `tru`, `{} {}`, `[1 2]`, `{"a":1,}`, `x`} {
		if v, err := decodeCanonical([]byte(b)); err == nil {
			t.Errorf("decode %q: got %#v, want an error", b, v)
		}
	}
}
