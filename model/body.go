package model

import (
	"encoding/json"
	"strconv"
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
	if len(ms.buf) > 0 {
		ms.buf = append(ms.buf, ',')
	}
	ms.buf = append(ms.buf, b...)
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
