package driver

import (
	"encoding/json"
	"fmt"
)

// decodeCanonical decodes PolicyJSON (one compact JSON value, as
// jsonform.PolicyJSON writes it) into the values the schema validator
// takes: map[string]any, []any, string, json.Number, bool and nil, exactly
// what jsonschema.UnmarshalJSON would give, without a second trip through
// encoding/json for every call. A string with escapes in it is unquoted by
// encoding/json. Anything it does not expect is an error; the input has
// passed jsonform, so that would be a bug.
func decodeCanonical(b []byte) (any, error) {
	d := canonDecoder{in: b}
	v, err := d.value()
	if err != nil {
		return nil, err
	}
	if d.pos != len(b) {
		return nil, fmt.Errorf("decode PolicyJSON: trailing bytes at offset %d", d.pos)
	}
	return v, nil
}

type canonDecoder struct {
	in  []byte
	pos int
}

func (d *canonDecoder) errf(format string, args ...any) error {
	return fmt.Errorf("decode PolicyJSON at offset %d: %s", d.pos, fmt.Sprintf(format, args...))
}

func (d *canonDecoder) value() (any, error) {
	if d.pos >= len(d.in) {
		return nil, d.errf("unexpected end")
	}
	switch c := d.in[d.pos]; {
	case c == '{':
		return d.object()
	case c == '[':
		return d.array()
	case c == '"':
		return d.str()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		start := d.pos
		for d.pos < len(d.in) && isNumberByte(d.in[d.pos]) {
			d.pos++
		}
		return json.Number(d.in[start:d.pos]), nil
	default:
		return nil, d.errf("unexpected %q", c)
	}
}

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

func (d *canonDecoder) literal(lit string) error {
	if len(d.in)-d.pos < len(lit) || string(d.in[d.pos:d.pos+len(lit)]) != lit {
		return d.errf("want %s", lit)
	}
	d.pos += len(lit)
	return nil
}

func (d *canonDecoder) str() (string, error) {
	start := d.pos
	escaped := false
	for i := start + 1; i < len(d.in); i++ {
		switch d.in[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			d.pos = i + 1
			if !escaped {
				return string(d.in[start+1 : i]), nil
			}
			var s string
			if err := json.Unmarshal(d.in[start:d.pos], &s); err != nil {
				return "", d.errf("string: %v", err)
			}
			return s, nil
		}
	}
	return "", d.errf("unterminated string")
}

func (d *canonDecoder) object() (any, error) {
	d.pos++ // {
	m := map[string]any{}
	if d.pos < len(d.in) && d.in[d.pos] == '}' {
		d.pos++
		return m, nil
	}
	for {
		if d.pos >= len(d.in) || d.in[d.pos] != '"' {
			return nil, d.errf("want a member name")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		if d.pos >= len(d.in) || d.in[d.pos] != ':' {
			return nil, d.errf("want ':'")
		}
		d.pos++
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		m[k] = v
		if d.pos >= len(d.in) {
			return nil, d.errf("unterminated object")
		}
		switch d.in[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return m, nil
		default:
			return nil, d.errf("want ',' or '}'")
		}
	}
}

func (d *canonDecoder) array() (any, error) {
	d.pos++ // [
	a := []any{}
	if d.pos < len(d.in) && d.in[d.pos] == ']' {
		d.pos++
		return a, nil
	}
	for {
		v, err := d.value()
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		if d.pos >= len(d.in) {
			return nil, d.errf("unterminated array")
		}
		switch d.in[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return a, nil
		default:
			return nil, d.errf("want ',' or ']'")
		}
	}
}
