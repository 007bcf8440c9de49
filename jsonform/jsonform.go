package jsonform

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"sync"
)

// Validate returns nil iff b is exactly one well-formed JSON value (RFC 8259,
// surrounding whitespace allowed) that is valid UTF-8 everywhere (inside
// strings too), nests objects and arrays no deeper than MaxDepth, repeats
// no object key (compared after unescaping) and has no \uD800-\uDFFF
// escape outside a proper high+low surrogate pair. Otherwise it returns an
// *Error wrapping one of the sentinel errors.
func Validate(b []byte) error {
	p := getParser(b, false, nil)
	err := p.run()
	putParser(p)
	if err != nil {
		return err
	}
	return nil
}

// PolicyJSON checks b as Check does and returns its canonical form: object
// keys sorted by the UTF-16 code units of the unescaped key (as RFC 8785
// sorts), no insignificant whitespace, numbers byte-for-byte as written,
// and strings re-encoded with only the escapes JSON requires (\" \\ and
// control characters, using \b \f \n \r \t where they exist and \u00xx
// otherwise); every other character is written as literal UTF-8. Inputs
// that differ only in key order, whitespace or escapes give identical
// bytes. The result is never longer than b.
func PolicyJSON(b []byte) ([]byte, error) {
	out, err := AppendPolicyJSON(make([]byte, 0, len(b)), b)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AppendPolicyJSON is PolicyJSON appending the canonical form to dst, so
// hot paths can reuse buffers. dst must not overlap b. On error it returns
// dst with its original length (its spare capacity may have been written).
func AppendPolicyJSON(dst, b []byte) ([]byte, error) {
	p := getParser(b, true, dst)
	err := p.run()
	out := p.out
	putParser(p)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// Marshal encodes v with encoding/json (HTML escaping off, no trailing
// newline) and returns the PolicyJSON of the result. It is a convenience
// for callers that build JSON from Go values; it uses reflection and is
// not meant for hot paths.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return PolicyJSON(bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}))
}

// Equal reports whether a and b both pass Check and have identical
// PolicyJSON.
func Equal(a, b []byte) bool {
	p := getParser(a, true, nil)
	defer putParser(p)
	ca, ok := p.canonInto(a, &p.bufA)
	if !ok {
		return false
	}
	cb, ok := p.canonInto(b, &p.bufB)
	return ok && bytes.Equal(ca, cb)
}

// canonInto writes the canonical form of in to *buf, reusing its storage.
func (p *parser) canonInto(in []byte, buf *[]byte) ([]byte, bool) {
	p.reset(in, true, (*buf)[:0])
	err := p.run()
	*buf = p.out
	p.out = nil
	return *buf, err == nil
}

// pool recycles parsers so Check and PolicyJSON do not allocate scratch
// space per call.
var pool = sync.Pool{New: func() any { return new(parser) }}

// maxPooledBytes bounds the scratch a pooled parser keeps, so one huge
// document does not pin memory forever.
const maxPooledBytes = 64 << 10

// getParser takes a parser from the pool, ready to read in.
func getParser(in []byte, emit bool, out []byte) *parser {
	p := pool.Get().(*parser)
	p.reset(in, emit, out)
	return p
}

// reset prepares p for a new input, keeping its scratch storage.
func (p *parser) reset(in []byte, emit bool, out []byte) {
	p.in, p.pos, p.depth, p.emit, p.out = in, 0, 0, emit, out
	p.arena = p.arena[:0]
	p.members = p.members[:0]
}

// putParser returns p to the pool, dropping references to caller memory and
// oversized scratch buffers.
func putParser(p *parser) {
	p.in, p.out = nil, nil
	if cap(p.arena) > maxPooledBytes {
		p.arena = nil
	}
	if cap(p.tmp) > maxPooledBytes {
		p.tmp = nil
	}
	if cap(p.bufA) > maxPooledBytes || cap(p.bufB) > maxPooledBytes {
		p.bufA, p.bufB = nil, nil
	}
	// Drop key references so pooled parsers do not keep inputs alive.
	clear(p.members[:cap(p.members)])
	if cap(p.members) > maxPooledBytes/32 {
		p.members = nil
	}
	pool.Put(p)
}

// sortMembers puts the members of the object whose body starts at out[body]
// into canonical key order, rewriting the body in place.
func (p *parser) sortMembers(base, body int) {
	ms := p.members[base:]
	if !sortByKey(ms) {
		return
	}
	p.tmp = append(p.tmp[:0], p.out[body:]...)
	p.out = p.out[:body]
	for i, m := range ms {
		if i > 0 {
			p.out = append(p.out, ',')
		}
		p.out = append(p.out, p.tmp[m.start-body:m.end-body]...)
	}
}

// smallSort is the member count up to which sortByKey uses insertion sort.
const smallSort = 12

// sortByKey sorts ms by key in canonical order and reports whether it had
// to move anything.
func sortByKey(ms []member) bool {
	if len(ms) > smallSort {
		if slices.IsSortedFunc(ms, compareMembers) {
			return false
		}
		slices.SortFunc(ms, compareMembers)
		return true
	}
	moved := false
	for i := 1; i < len(ms); i++ {
		if compareKeys(ms[i-1].key, ms[i].key) <= 0 {
			continue
		}
		m, j := ms[i], i
		for j > 0 && compareKeys(ms[j-1].key, m.key) > 0 {
			ms[j] = ms[j-1]
			j--
		}
		ms[j] = m
		moved = true
	}
	return moved
}

// compareMembers orders members by key; see compareKeys.
func compareMembers(a, b member) int { return compareKeys(a.key, b.key) }

// compareKeys orders two valid UTF-8 keys by their UTF-16 code units, as
// RFC 8785 requires. UTF-8 byte order is code point order, which agrees
// with UTF-16 order except between U+E000-U+FFFF (lead bytes 0xEE, 0xEF)
// and characters above U+FFFF (lead bytes 0xF0-0xF4, surrogate pairs in
// UTF-16, which sort first). A difference inside a character (in a
// continuation byte) is between characters with the same lead byte, so
// only a difference in lead bytes can need the correction.
func compareKeys(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	x, y := a[i], b[i]
	if x >= 0xEE && y >= 0xEE && (x >= 0xF0) != (y >= 0xF0) {
		return cmp.Compare(y, x)
	}
	return cmp.Compare(x, y)
}
