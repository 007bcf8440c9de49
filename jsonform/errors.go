package jsonform

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting Check accepts. Depth counts objects and
// arrays: a scalar is depth 0, `[1]` is depth 1 and `[[1]]` is depth 2.
const MaxDepth = 256

// Sentinel errors. Every *Error returned by this package wraps exactly one of
// them, so callers branch with errors.Is.
var (
	// ErrSyntax reports input that is not one RFC 8259 JSON value: empty
	// input, trailing data after the value, a bad literal, a bad number, a
	// bad escape, an unterminated string or a raw control character in a
	// string.
	ErrSyntax = errors.New("malformed JSON")
	// ErrUTF8 reports a byte sequence that is not valid UTF-8 (including
	// overlong encodings and UTF-8-encoded surrogates), inside or outside
	// strings.
	ErrUTF8 = errors.New("invalid UTF-8")
	// ErrDepth reports objects and arrays nested deeper than MaxDepth.
	ErrDepth = errors.New("nested too deep")
	// ErrDuplicateKey reports an object key that occurs twice in the same
	// object, compared after unescaping: {"a":1,"\u0061":2} repeats "a".
	ErrDuplicateKey = errors.New("repeated object key")
	// ErrFoldedKey reports two keys of one object that differ but are
	// equal under the case folding encoding/json uses to match keys to
	// struct fields ({"dest":1,"DEST":2}, {"dest":1,"deſt":2}): a validator
	// and a policy reading the object as keys would see two members, a tool
	// decoding it into a struct one, and which one depends on order.
	ErrFoldedKey = errors.New("object keys equal under case folding")
	// ErrLoneSurrogate reports a \uD800-\uDFFF escape that is not part of a
	// high surrogate immediately followed by a low surrogate.
	ErrLoneSurrogate = errors.New("escaped surrogate outside a pair")
)

// Error is what Check and PolicyJSON return: it names what was wrong and
// where.
type Error struct {
	// Offset is the byte offset in the input where the problem was found.
	Offset int
	// Pointer is the RFC 6901 JSON pointer of the value being read when the
	// problem was found; "" is the root.
	Pointer string
	// Reason is human-readable text such as `repeated object key "a"`.
	Reason string
	// Err is one of the package's sentinel errors.
	Err error
}

// Error formats the error as `json at byte 14 (/a/b): reason`. The pointer
// part is omitted for the root, so "(/)" always means the key "" of the
// root object.
func (e *Error) Error() string {
	var sb strings.Builder
	sb.WriteString("json at byte ")
	sb.WriteString(strconv.Itoa(e.Offset))
	if e.Pointer != "" {
		sb.WriteString(" (")
		sb.WriteString(e.Pointer)
		sb.WriteString(")")
	}
	sb.WriteString(": ")
	sb.WriteString(e.Reason)
	return sb.String()
}

// Unwrap returns the sentinel error, so errors.Is(err, ErrSyntax) works.
func (e *Error) Unwrap() error { return e.Err }

// inKey records that the error happened inside the member named key.
func (e *Error) inKey(key []byte) {
	e.Pointer = "/" + escapePointerToken(string(key)) + e.Pointer
}

// inIndex records that the error happened inside array element i.
func (e *Error) inIndex(i int) {
	e.Pointer = "/" + strconv.Itoa(i) + e.Pointer
}

// escapePointerToken escapes a reference token as RFC 6901 requires.
func escapePointerToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	s = strings.ReplaceAll(s, "~", "~0")
	return strings.ReplaceAll(s, "/", "~1")
}

// errAt builds an *Error at offset off. The pointer is filled in as the
// error travels up through the enclosing objects and arrays.
func errAt(off int, sentinel error, reason string) *Error {
	return &Error{Offset: off, Reason: reason, Err: sentinel}
}

// unexpectedAt reports the byte at off as not allowed where it stands.
// Bytes that do not start valid UTF-8 are reported as ErrUTF8, since the
// input is then invalid whatever the grammar says.
func unexpectedAt(in []byte, off int, where string) *Error {
	if off >= len(in) {
		return errAt(off, ErrSyntax, "unexpected end of input"+where)
	}
	c := in[off]
	if c < utf8.RuneSelf {
		return errAt(off, ErrSyntax, "unexpected byte "+describeByte(c)+where)
	}
	r, n := utf8.DecodeRune(in[off:])
	if r == utf8.RuneError && n == 1 {
		return invalidUTF8(c, off)
	}
	return errAt(off, ErrSyntax, "unexpected character "+strconv.QuoteRune(r)+where)
}

// invalidUTF8 reports byte c at off as not starting a valid UTF-8 sequence.
func invalidUTF8(c byte, off int) *Error {
	return errAt(off, ErrUTF8, "invalid UTF-8 byte "+hexByte(c))
}

// describeByte renders an ASCII byte for an error reason: 'x' when it is
// printable, 0x0a otherwise.
func describeByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return "'" + string(rune(c)) + "'"
	}
	return hexByte(c)
}

// hexByte renders c as 0x followed by two lowercase hex digits.
func hexByte(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{'0', 'x', digits[c>>4], digits[c&0xf]})
}

// quoteKey renders a key for an error reason, shortening very long keys.
func quoteKey(key []byte) string {
	const limit = 64
	if len(key) <= limit {
		return strconv.Quote(string(key))
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return strconv.Quote(string(key[:cut])) + "..."
}
