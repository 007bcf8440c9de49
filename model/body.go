package model

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/arbiter-run/arbiter/jsonform"
)

// messages is a conversation's messages encoded once each, as a JSON
// array's elements: a step appends its own, and a request copies the
// bytes, so the work per step follows the prompt's bytes, not the
// history's events (the SDK's encoder, by reflection, would redo every
// message at every call).
type messages struct {
	buf   []byte // elements, comma separated
	turns int
	bytes int // text bytes, for the reservation
	err   error
}

// push encodes m (an SDK message param) after the others.
func (ms *messages) push(m any) {
	b, err := json.Marshal(m)
	if err != nil {
		ms.err = err
		return
	}
	ms.buf = append(ms.next(), b...)
}

// next returns the buffer ready for one more element.
func (ms *messages) next() []byte {
	if len(ms.buf) > 0 {
		return append(ms.buf, ',')
	}
	return ms.buf
}

func (ms *messages) steps() int { return ms.turns }
func (ms *messages) size() int  { return ms.bytes }

// request writes a request body: the fields before the messages (each
// `"name":value`), the messages under key, the tools if any.
func request(key string, ms *messages, tools []byte, fields ...string) []byte {
	n := len(ms.buf) + len(tools) + 64
	for _, f := range fields {
		n += len(f) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for _, f := range fields {
		b = append(b, f...)
		b = append(b, ',')
	}
	b = append(b, strconv.Quote(key)...)
	b = append(b, ":["...)
	b = append(b, ms.buf...)
	b = append(b, ']')
	if len(tools) > 2 { // not []
		b = append(b, `,"tools":`...)
		b = append(b, tools...)
	}
	return append(b, '}')
}

func field(name string, v any) string {
	b, _ := json.Marshal(v) // strings, numbers and stored JSON always encode
	return strconv.Quote(name) + ":" + string(b)
}

// appendString appends s as json.Marshal writes a string (HTML
// characters escaped), as the SDK's own encoding of its params does.
func appendString(b []byte, s string) []byte { return jsonform.AppendQuoted(b, s, true) }

// appendRaw appends raw, which must be valid JSON, as encoding/json's
// Marshal writes a json.RawMessage: compacted, with <, >, &, U+2028 and
// U+2029 escaped.
func appendRaw(b []byte, raw []byte) []byte {
	start := len(b)
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return append(b, raw...) // not reached: the caller checked raw
	}
	b = buf.Bytes()
	if bytes.ContainsAny(b[start:], "<>&\u2028\u2029") {
		var esc bytes.Buffer
		json.HTMLEscape(&esc, b[start:])
		b = append(b[:start], esc.Bytes()...)
	}
	return b
}
