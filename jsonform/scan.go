package jsonform

import (
	"bytes"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// linearKeyLimit is how many members an object may have before duplicate
// detection switches from a linear scan to a map. Tool arguments almost
// always stay below it, so the hot path never builds a map.
const linearKeyLimit = 16

// parser is a single-pass recursive-descent scanner over one input. When
// emit is set it writes the canonical form to out as it goes; otherwise it
// only validates. Recursion is bounded by MaxDepth.
type parser struct {
	in    []byte
	pos   int
	depth int
	emit  bool

	out     []byte   // canonical output (emit mode only)
	arena   []byte   // unescaped strings; append-only while their object is open
	tmp     []byte   // scratch for reordering object members
	members []member // members of all open objects, innermost last

	bufA, bufB []byte // scratch outputs for Equal
}

// member is one object member seen so far.
type member struct {
	key        []byte // unescaped key; points into the input or the arena
	start, end int    // span of `"key":value` in out (emit mode only)
}

// run parses exactly one value followed only by whitespace.
func (p *parser) run() *Error {
	if err := p.value(); err != nil {
		return err
	}
	p.skipWS()
	if p.pos < len(p.in) {
		err := unexpectedAt(p.in, p.pos, "")
		if err.Err == ErrSyntax {
			err.Reason = "trailing data after the value: " + err.Reason
		}
		return err
	}
	return nil
}

// skipWS advances past JSON insignificant whitespace.
func (p *parser) skipWS() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses one value starting at the next non-whitespace byte.
func (p *parser) value() *Error {
	p.skipWS()
	if p.pos >= len(p.in) {
		return errAt(p.pos, ErrSyntax, "unexpected end of input, expected a value")
	}
	switch c := p.in[p.pos]; c {
	case '{':
		return p.object()
	case '[':
		return p.array()
	case '"':
		return p.stringValue()
	case 't':
		return p.literal("true")
	case 'f':
		return p.literal("false")
	case 'n':
		return p.literal("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return p.number()
		}
		return unexpectedAt(p.in, p.pos, ", expected a value")
	}
}

// enter checks and bumps the nesting depth for the object or array at p.pos.
func (p *parser) enter() *Error {
	if p.depth >= MaxDepth {
		return errAt(p.pos, ErrDepth, "nesting deeper than "+strconv.Itoa(MaxDepth))
	}
	p.depth++
	p.pos++
	return nil
}

// object parses an object whose '{' is at p.pos.
func (p *parser) object() *Error {
	if err := p.enter(); err != nil {
		return err
	}
	base, arenaMark := len(p.members), len(p.arena)
	body := len(p.out) + 1
	if p.emit {
		p.out = append(p.out, '{')
	}
	p.skipWS()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
	} else if err := p.objectBody(base); err != nil {
		return err
	}
	if p.emit {
		p.sortMembers(base, body)
		p.out = append(p.out, '}')
	}
	p.members = p.members[:base]
	p.arena = p.arena[:arenaMark]
	p.depth--
	return nil
}

// objectBody parses `"key":value` pairs up to and including the closing '}'.
// The members are recorded from index base of p.members.
func (p *parser) objectBody(base int) *Error {
	var set map[string][]byte
	for {
		p.skipWS()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return unexpectedAt(p.in, p.pos, ", expected a string object key")
		}
		keyOff := p.pos
		key, escaped, err := p.str(true)
		if err != nil {
			return err
		}
		if prev := p.seen(base, key, &set); prev != nil {
			if bytes.Equal(prev, key) {
				return errAt(keyOff, ErrDuplicateKey, "repeated object key "+quoteKey(key))
			}
			return errAt(keyOff, ErrFoldedKey, "object key "+quoteKey(key)+" equals "+quoteKey(prev)+" under case folding (encoding/json would decode both into one field)")
		}
		start := len(p.out)
		p.skipWS()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return unexpectedAt(p.in, p.pos, " after object key, expected ':'")
		}
		p.pos++
		if p.emit {
			p.out = appendString(p.out, key, escaped)
			p.out = append(p.out, ':')
		}
		if err := p.value(); err != nil {
			err.inKey(key)
			return err
		}
		p.members = append(p.members, member{key: key, start: start, end: len(p.out)})
		if done, err := p.next('}', " after object member, expected ',' or '}'"); done || err != nil {
			return err
		}
	}
}

// seen returns the key of the object whose members start at base that key
// repeats, or that it equals under encoding/json's case folding (which
// decodes "dest" and "deſt" into one field), or nil. Small objects are
// scanned linearly; large ones use *set, keyed by the folded key and built
// on first need.
func (p *parser) seen(base int, key []byte, set *map[string][]byte) []byte {
	ms := p.members[base:]
	if len(ms) < linearKeyLimit {
		for i := range ms {
			if bytes.EqualFold(ms[i].key, key) {
				return ms[i].key
			}
		}
		return nil
	}
	if *set == nil {
		*set = make(map[string][]byte, 2*len(ms))
		for i := range ms {
			(*set)[string(foldKey(nil, ms[i].key))] = ms[i].key
		}
	}
	folded := string(foldKey(nil, key))
	if prev, ok := (*set)[folded]; ok {
		return prev
	}
	(*set)[folded] = key
	return nil
}

// foldKey appends to dst a form of key such that two keys have the same
// form exactly when bytes.EqualFold holds for them: ASCII letters upper
// cased, every other rune the smallest of its simple fold orbit, as
// encoding/json matches object keys to struct fields.
func foldKey(dst, key []byte) []byte {
	for i := 0; i < len(key); {
		c := key[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(key[i:])
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		dst = utf8.AppendRune(dst, r)
		i += n
	}
	return dst
}

// next consumes the ',' or the closing byte that follows an element. It
// reports done when the closing byte was consumed.
func (p *parser) next(closing byte, where string) (done bool, err *Error) {
	p.skipWS()
	if p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ',':
			p.pos++
			if p.emit {
				p.out = append(p.out, ',')
			}
			return false, nil
		case closing:
			p.pos++
			return true, nil
		}
	}
	return false, unexpectedAt(p.in, p.pos, where)
}

// array parses an array whose '[' is at p.pos.
func (p *parser) array() *Error {
	if err := p.enter(); err != nil {
		return err
	}
	if p.emit {
		p.out = append(p.out, '[')
	}
	p.skipWS()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
	} else {
		for i := 0; ; i++ {
			if err := p.value(); err != nil {
				err.inIndex(i)
				return err
			}
			done, err := p.next(']', " after array element, expected ',' or ']'")
			if err != nil {
				return err
			}
			if done {
				break
			}
		}
	}
	if p.emit {
		p.out = append(p.out, ']')
	}
	p.depth--
	return nil
}

// literal parses true, false or null; p.in[p.pos] == lit[0] already.
func (p *parser) literal(lit string) *Error {
	for k := 1; k < len(lit); k++ {
		j := p.pos + k
		if j >= len(p.in) || p.in[j] != lit[k] {
			return unexpectedAt(p.in, j, " in literal "+lit)
		}
	}
	p.pos += len(lit)
	if p.emit {
		p.out = append(p.out, lit...)
	}
	return nil
}

// number parses an RFC 8259 number and emits it exactly as written.
func (p *parser) number() *Error {
	in, start := p.in, p.pos
	i := start
	if in[i] == '-' {
		i++
	}
	switch {
	case i >= len(in) || !isDigit(in[i]):
		return unexpectedAt(in, i, " in number, expected a digit")
	case in[i] == '0':
		i++
		if i < len(in) && isDigit(in[i]) {
			return errAt(i, ErrSyntax, "number has a leading zero")
		}
	default:
		i = skipDigits(in, i)
	}
	if i < len(in) && in[i] == '.' {
		i++
		if i >= len(in) || !isDigit(in[i]) {
			return unexpectedAt(in, i, " after decimal point, expected a digit")
		}
		i = skipDigits(in, i)
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		if i >= len(in) || !isDigit(in[i]) {
			return unexpectedAt(in, i, " in exponent, expected a digit")
		}
		i = skipDigits(in, i)
	}
	p.pos = i
	if p.emit {
		p.out = append(p.out, in[start:i]...)
	}
	return nil
}

// isDigit reports whether c is an ASCII digit.
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// skipDigits returns the index of the first non-digit at or after i.
func skipDigits(in []byte, i int) int {
	for i < len(in) && isDigit(in[i]) {
		i++
	}
	return i
}
