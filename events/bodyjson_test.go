package events

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode"

	"pgregory.net/rapid"
)

// drawText draws strings that exercise every escaping path: plain ASCII,
// quotes and backslashes, control bytes, HTML characters, U+2028, other
// Unicode, and invalid UTF-8.
func drawText(t *rapid.T, label string) string {
	return rapid.OneOf(
		rapid.Just(""),
		rapid.StringMatching(`[a-z_]{1,12}`),
		rapid.String(),
		rapid.SampledFrom([]string{"a\"b", `back\slash`, "tab\there", "nl\n", "\x00\x1f", "<&>", "\u2028\u2029", "é ü 日本", "\xff\xfe bad", "a\xc3"}),
	).Draw(t, label)
}

func drawArgs(t *rapid.T) json.RawMessage {
	return json.RawMessage(rapid.SampledFrom([]string{
		"", `{}`, `{"n":12}`, `{ "a" : [1, 2,  3] }`, "{\n\t\"x\": \"<&>\"\n}", `"just a string"`, `[true,null]`, `{"bad":`, `nope`, `{"u":"\u2028"}`,
	}).Draw(t, "args"))
}

// drawPolicy draws a policy body, with and without the fields the hand
// encoder leaves to encoding/json.
func drawPolicy(t *rapid.T) PolicyBody {
	b := PolicyBody{
		Step: rapid.IntRange(0, 1<<20).Draw(t, "step"), Outcome: Outcome(drawText(t, "outcome")), Reason: drawText(t, "reason"),
		PolicyID: drawText(t, "policy_id"), Args: drawArgs(t), ToolHash: drawText(t, "tool_hash"),
		Consumes: drawText(t, "consumes"), Origin: drawText(t, "origin"), Resume: rapid.Bool().Draw(t, "resume"),
	}
	if rapid.Bool().Draw(t, "approval") {
		b.Approval = &ApprovalRequest{ID: "a1", Kind: drawText(t, "approval_kind"), Hash: "h"}
	}
	switch rapid.IntRange(0, 2).Draw(t, "parts") {
	case 1:
		b.Parts = []PolicyPart{}
	case 2:
		for i := range rapid.IntRange(1, 3).Draw(t, "nparts") {
			b.Parts = append(b.Parts, PolicyPart{
				ID: drawText(t, "part_id"), Outcome: Outcome(drawText(t, "part_outcome")), Reason: drawText(t, "part_reason"),
				Code: drawText(t, "part_code"), Mode: drawText(t, "part_mode"), Window: drawText(t, "part_window"),
				Count: rapid.Int64Range(-1, 1<<40).Draw(t, "part_count") * int64(i%2),
			})
		}
	}
	if rapid.Bool().Draw(t, "shadow") {
		b.Shadow = &ShadowBody{PolicyID: drawText(t, "shadow_id"), Outcome: "allow"}
	}
	return b
}

// TestBodyJSON_SameAsEncodingJSON: the hand encoders write exactly what
// encoding/json writes, and leave to it every body they cannot (so its
// errors stay its own).
func TestBodyJSON_SameAsEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var body any
		switch rapid.IntRange(0, 2).Draw(t, "kind") {
		case 0:
			b := StepDecidedBody{
				Step: rapid.IntRange(-1, 1<<40).Draw(t, "step"), Tool: drawText(t, "tool"), Args: drawText(t, "args"),
				CallID: drawText(t, "call_id"), Reason: drawText(t, "reason"),
			}
			if rapid.Bool().Draw(t, "bytes") {
				b.ArgsBytes = []byte(drawText(t, "args_bytes"))
			}
			if rapid.Bool().Draw(t, "policy") {
				p := drawPolicy(t)
				b.Policy = &p
			}
			body = b
		case 1:
			body = drawPolicy(t)
		default:
			body = ObservedBody{
				Step: rapid.IntRange(0, 1<<20).Draw(t, "step"), Kind: ObservationKind(drawText(t, "kind")),
				Content: drawText(t, "content"), Truncated: rapid.Bool().Draw(t, "truncated"),
			}
		}
		want, wantErr := encodeJSON(body)
		got, err := marshalBody(body)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%#v: error %v, encoding/json's %v", body, err, wantErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%#v:\n got %s\nwant %s", body, got, want)
		}
	})
}

// TestAppendString_SameAsEncodingJSON: every ASCII byte alone, and drawn
// strings of any bytes, are written exactly as encoding/json writes them.
func TestAppendString_SameAsEncodingJSON(t *testing.T) {
	check := func(t interface{ Fatalf(string, ...any) }, s string) {
		want, err := encodeJSON(s)
		if err != nil {
			t.Fatalf("encoding/json refused %q: %v", s, err)
		}
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	}
	for c := range 0x80 {
		check(t, "a"+string(rune(c))+"b")
	}
	rapid.Check(t, func(t *rapid.T) {
		ascii := rapid.StringOfN(rapid.RuneFrom(nil, &unicode.RangeTable{R16: []unicode.Range16{{Lo: 0, Hi: 0x7f, Stride: 1}}}), 0, 40, -1).Draw(t, "ascii")
		check(t, ascii)
		check(t, drawText(t, "any"))
	})
}
