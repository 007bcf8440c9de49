package events

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"
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
		switch rapid.IntRange(0, 3).Draw(t, "kind") {
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

// TestBodyJSON_SizedOnce: marshalBody makes its buffer once, at the size
// bodySize says, and the hand encoder never outgrows it (a grown buffer has
// a larger capacity than the one made). The size is exact but for a
// policy's arguments, counted before compacting.
func TestBodyJSON_SizedOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var body any
		var args json.RawMessage
		switch rapid.IntRange(0, 3).Draw(t, "kind") {
		case 0:
			b := drawDecided(t)
			if b.Policy != nil {
				args = b.Policy.Args
			}
			body = b
		case 1:
			b := drawPolicy(t)
			args, body = b.Args, b
		case 2:
			b := drawEnd(t)
			if b.Policy != nil {
				args = b.Policy.Args
			}
			body = b
		default:
			body = drawObserved(t)
		}
		n, ok := bodySize(body)
		got, hand := appendBody(make([]byte, 0, n), body)
		switch {
		case !ok && hand:
			t.Fatalf("%#v: hand encoded a body bodySize does not size", body)
		case !ok:
			return
		case !hand && json.Valid(args):
			// Only arguments that are not JSON send a sized body to
			// encoding/json.
			t.Fatalf("%#v: sized, and then not hand encoded", body)
		case !hand:
			return
		}
		if cap(got) != n {
			t.Fatalf("%#v: buffer grew from %d to %d bytes (%d written)", body, n, cap(got), len(got))
		}
		var compact bytes.Buffer
		if len(args) > 0 {
			if err := json.Compact(&compact, args); err != nil {
				t.Fatalf("hand encoded a body whose arguments do not compact: %v", err)
			}
		}
		if slack := len(args) - compact.Len(); n-len(got) != slack {
			t.Fatalf("%#v: sized %d, wrote %d (want exact but for the %d bytes compacting the arguments saves)", body, n, len(got), slack)
		}
	})
}

// TestQuotedLen_IsAppendStringsLength: quotedLen counts what appendString
// writes, for every ASCII byte and for strings of any bytes.
func TestQuotedLen_IsAppendStringsLength(t *testing.T) {
	for c := range 0x100 {
		if s := "a" + string([]byte{byte(c)}) + "b"; quotedLen(s) != len(appendString(nil, s)) {
			t.Errorf("byte %#x: quotedLen %d, appendString wrote %d", c, quotedLen(s), len(appendString(nil, s)))
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		s := drawText(t, "s")
		if got, want := quotedLen(s), len(appendString(nil, s)); got != want {
			t.Fatalf("%q: quotedLen %d, appendString wrote %d", s, got, want)
		}
	})
}

func FuzzQuotedLen(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c", "\x00\x1f\x7f", "\u2028\u2029", "\xff\xfe", "\xed\xa0\x80", "é日本\U0001F600"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := quotedLen(s), len(appendString(nil, s)); got != want {
			t.Fatalf("%q: quotedLen %d, appendString wrote %d", s, got, want)
		}
	})
}

// TestIntLen_IsAppendIntsLength: the digit counts the sizes use.
func TestIntLen_IsAppendIntsLength(t *testing.T) {
	for _, v := range []int64{0, 1, 9, 10, 99, 100, -1, -9, -10, 1<<63 - 1, -1 << 63} {
		if got, want := intLen(v), len(strconv.AppendInt(nil, v, 10)); got != want {
			t.Errorf("intLen(%d) = %d, want %d", v, got, want)
		}
	}
	for _, v := range []uint64{0, 9, 10, 1<<64 - 1, 1e19 - 1, 1e19} {
		if got, want := uintLen(v), len(strconv.AppendUint(nil, v, 10)); got != want {
			t.Errorf("uintLen(%d) = %d, want %d", v, got, want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		v := rapid.Int64().Draw(t, "v")
		if got, want := intLen(v), len(strconv.AppendInt(nil, v, 10)); got != want {
			t.Fatalf("intLen(%d) = %d, want %d", v, got, want)
		}
	})
}

// TestEncode_SameAsEncodingJSON: the envelope is encoding/json's encoding
// of the event (without HTML escaping), written into one buffer made at its
// final size.
func TestEncode_SameAsEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := drawObserved(t)
		body, err := marshalBody(o)
		if err != nil {
			t.Fatal(err)
		}
		e := Event{
			V: rapid.IntRange(0, 1000).Draw(t, "v"), ID: drawText(t, "id"), Run: drawText(t, "run"),
			Seq: rapid.Uint64().Draw(t, "seq"), Kind: Kind(drawText(t, "kind")),
			Time: time.Unix(rapid.Int64Range(-62135596800+86400, 253402300799-86400).Draw(t, "unix"), rapid.Int64Range(0, 999999999).Draw(t, "nanos")).
				In(time.FixedZone("z", 60*rapid.IntRange(-12*60, 14*60).Draw(t, "zone"))),
			Prev: drawText(t, "prev"), Body: body,
		}
		want, err := encodeJSON(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
		if len(got) != cap(got) {
			t.Fatalf("envelope of %d bytes in a buffer of %d: sized wrong", len(got), cap(got))
		}
		// A time encoding/json refuses (a year past 9999) is still
		// written, into a buffer of the right size.
		e.Time = time.Unix(rapid.Int64Range(253402300800, 1<<62).Draw(t, "far"), 0).UTC()
		if got, err = e.Encode(); err != nil || len(got) != cap(got) {
			t.Fatalf("far time: %d bytes in a buffer of %d (%v)", len(got), cap(got), err)
		}
	})
}
