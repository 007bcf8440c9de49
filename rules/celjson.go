package rules

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
)

// jsonCEL decodes a JSON document straight into the CEL value that
// celValue makes of what encoding/json decodes from it into an any:
// objects as maps (a repeated key: the last), arrays as lists, numbers as
// doubles, and false when encoding/json would refuse the document (not
// JSON, or a number out of a double's range). Going through Go maps first
// cost two maps and a boxed value for every argument on every step
// (FuzzArgsCEL holds the two to the same values).
func jsonCEL(data []byte) (ref.Val, bool) {
	if !json.Valid(data) {
		return nil, false
	}
	d := celDecoder{data: data}
	v, ok := d.value()
	if !ok {
		return nil, false
	}
	return v, true
}

// celDecoder reads a document json.Valid has accepted, so it checks only
// what validity does not settle: a number's range.
type celDecoder struct {
	data []byte
	i    int
}

func (d *celDecoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *celDecoder) value() (ref.Val, bool) {
	d.space()
	switch c := d.data[d.i]; c {
	case '{':
		d.i++
		m := map[string]ref.Val{}
		d.space()
		if d.data[d.i] == '}' {
			d.i++
			return types.NewMap(types.DefaultTypeAdapter, m), true
		}
		for {
			d.space()
			k, ok := d.string()
			if !ok {
				return nil, false
			}
			d.space()
			d.i++ // ':'
			v, ok := d.value()
			if !ok {
				return nil, false
			}
			m[k] = v
			d.space()
			if d.data[d.i] == ',' {
				d.i++
				continue
			}
			d.i++ // '}'
			return types.NewMap(types.DefaultTypeAdapter, m), true
		}
	case '[':
		d.i++
		l := []ref.Val{}
		d.space()
		if d.data[d.i] == ']' {
			d.i++
			return types.NewRefValList(types.DefaultTypeAdapter, l), true
		}
		for {
			v, ok := d.value()
			if !ok {
				return nil, false
			}
			l = append(l, v)
			d.space()
			if d.data[d.i] == ',' {
				d.i++
				continue
			}
			d.i++ // ']'
			return types.NewRefValList(types.DefaultTypeAdapter, l), true
		}
	case '"':
		s, ok := d.string()
		if !ok {
			return nil, false
		}
		return types.String(s), true
	case 't':
		d.i += len("true")
		return types.True, true
	case 'f':
		d.i += len("false")
		return types.False, true
	case 'n':
		d.i += len("null")
		return types.NullValue, true
	}
	start := d.i
	for d.i < len(d.data) {
		c := d.data[d.i]
		if (c < '0' || c > '9') && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' {
			break
		}
		d.i++
	}
	f, err := strconv.ParseFloat(string(d.data[start:d.i]), 64)
	if err != nil {
		return nil, false // out of range: encoding/json refuses it too
	}
	return types.Double(f), true
}

// string reads a string at d.i. One without escapes, in valid UTF-8, is
// its own bytes; any other is unquoted by encoding/json, which replaces
// what is not valid UTF-8 as it does when it decodes the whole document.
func (d *celDecoder) string() (string, bool) {
	start := d.i
	d.i++
	plain := true
	for {
		c := d.data[d.i]
		if c == '"' {
			break
		}
		if c == '\\' {
			plain = false
			d.i++
		}
		d.i++
	}
	d.i++
	raw := d.data[start:d.i]
	if body := raw[1 : len(raw)-1]; plain && utf8.Valid(body) {
		return string(body), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}
