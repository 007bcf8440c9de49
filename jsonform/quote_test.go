package jsonform_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/arbiter-run/arbiter/jsonform"
)

// quoted is encoding/json's spelling of s, with or without HTML escaping.
func quoted(t testing.TB, s string, escapeHTML bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(escapeHTML)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

var quoteSeeds = []string{
	"", "plain", `"quoted" \back\slash`, "\b\f\n\r\t\x00\x01\x1f\x7f",
	"<a href=x>&amp;</a>", "caf\u00e9 \u4e16\u754c \U0001F600", "\u2028\u2029",
	"bad \xff\xfe utf-8 \xc3", "\xed\xa0\x80 surrogate", "mixed <\u2028\xff&\n>",
}

func TestAppendQuoted_SameAsEncodingJSON(t *testing.T) {
	for _, s := range quoteSeeds {
		for _, html := range []bool{false, true} {
			got := jsonform.AppendQuoted([]byte("x"), s, html)
			if want := append([]byte("x"), quoted(t, s, html)...); !bytes.Equal(got, want) {
				t.Errorf("AppendQuoted(%q, html=%v) = %s, want %s", s, html, got, want)
			}
		}
	}
}

func FuzzAppendQuoted(f *testing.F) {
	for _, s := range quoteSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, html := range []bool{false, true} {
			if got, want := jsonform.AppendQuoted(nil, s, html), quoted(t, s, html); !bytes.Equal(got, want) {
				t.Fatalf("AppendQuoted(%q, html=%v) = %s, want %s", s, html, got, want)
			}
		}
	})
}
