package jsinbox

import (
	"testing"

	"pgregory.net/rapid"
)

// TestParseAck_SameAsEncodingJSON: the direct reading of a plain ack gives
// exactly what decoding it does, and every other reply is decoded.
func TestParseAck_SameAsEncodingJSON(t *testing.T) {
	fixed := []string{
		`{"stream":"ARB_RUNS_0","seq":1}`,
		`{"stream":"ARB_RUNS_0","seq":18446744073709551615}`,
		`{"stream":"ARB_RUNS_0","seq":18446744073709551616}`,
		`{"stream":"ARB_RUNS_0","seq":0}`,
		`{"stream":"ARB_RUNS_0","seq":012}`,
		`{"stream":"ARB_RUNS_0","seq":12,"duplicate":true}`,
		`{"stream":"ARB_RUNS_0","domain":"hub","seq":12}`,
		`{"stream":"","seq":12}`,
		`{"stream":"A\"B","seq":12}`,
		`{"stream":"ARB","seq":12} `,
		`{"stream":"ARB","seq":-1}`,
		`{"stream":"ARB","seq":1.5}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"ARB_RUNS_0","seq":0}`,
		`{"error":{"code":503,"err_code":10077,"description":"resource limits exceeded"}}`,
		``, `{`, `null`, `{"stream":"ARB","seq":`,
	}
	check := func(t interface {
		Fatalf(string, ...any)
	}, b string) {
		gotSeq, gotDup, gotErr := parseAck([]byte(b))
		wantSeq, wantDup, wantErr := decodeAck([]byte(b))
		if gotSeq != wantSeq || gotDup != wantDup || (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("ack %q: got %d, %v, %v; decoding gives %d, %v, %v", b, gotSeq, gotDup, gotErr, wantSeq, wantDup, wantErr)
		}
		if seq, ok := plainAck([]byte(b)); ok && (wantErr != nil || seq != wantSeq) {
			t.Fatalf("ack %q read directly as %d, decoding gives %d, %v", b, seq, wantSeq, wantErr)
		}
	}
	for _, b := range fixed {
		check(t, b)
	}
	if _, ok := plainAck([]byte(fixed[0])); !ok {
		t.Fatalf("a plain ack %s is not read directly", fixed[0])
	}
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.OneOf(rapid.StringMatching(`[A-Z_0-9]{0,12}`), rapid.String()).Draw(t, "stream")
		seq := rapid.OneOf(rapid.StringMatching(`[0-9]{1,22}`), rapid.SampledFrom([]string{"0", "-3", "1e3", "7.0", ""})).Draw(t, "seq")
		tail := rapid.SampledFrom([]string{"}", ",\"duplicate\":true}", " }", "}x", ""}).Draw(t, "tail")
		check(t, `{"stream":"`+name+`","seq":`+seq+tail)
	})
}
