package model

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
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

// appendString appends s as a JSON string exactly as encoding/json's
// Marshal writes it: <, > and & escaped (\u003c, \u003e, \u0026), as
// are U+2028 and U+2029; \b, \f, \n, \r and \t short, other control
// bytes as \u00XX; each byte of invalid UTF-8 as \ufffd.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

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
