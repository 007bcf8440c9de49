// Package visible makes text safe to put in front of a person: every
// character that a terminal or a browser would act on or hide instead of
// showing is replaced by an escape that shows what it was.
//
// Arbiter shows text the model or a tool chose (arguments, results,
// presentations, reasons) to operators deciding on it. Shown raw, that
// text could steer the display: a terminal control sequence (ESC or the
// one-byte CSI, U+009B) moves the cursor, overwrites or conceals what the
// operator reads, and a bidirectional override (U+202E) or an invisible
// character (U+200B, a tag character) makes a browser or terminal show
// "1000" for "0001". What the signature and the hash bind is the bytes;
// what the operator sees must be those bytes, not what they do to a
// display.
//
// Replaced: control characters other than newline and tab (carriage
// return included: it overwrites a line), DEL and the C1 controls; every
// format character (Unicode category Cf: the bidirectional controls, the
// zero-width characters, the byte order mark, the tag characters); the
// line and paragraph separators; the variation selectors; and each byte
// that is not UTF-8. A [Writer], which is for a terminal, also replaces
// every right-to-left character (bidirectional classes R, AL and AN:
// Hebrew and Arabic letters and digits): a terminal that lays text out in
// both directions would otherwise reorder a run of them with the numbers
// beside it, so that ["אבי",5,"דני",1000000] reads with 1000000 first, and
// a terminal has nothing like the console page's left-to-right override
// (console.css) to stop it. A rune becomes \uXXXX (one past U+FFFF a surrogate pair,
// \uXXXX\uXXXX, as JSON writes it), a byte \xXX: plain ASCII. Inside a JSON string an escaped rune is the same string
// again; a literal backslash in JSON is already escaped, so the two never
// read alike there.
package visible

import (
	"io"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/bidi"
)

// hidden reports whether r must not reach a display as itself.
func hidden(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
		return true
	case r == 0x2028 || r == 0x2029:
		return true
	case r >= 0xfe00 && r <= 0xfe0f, r >= 0xe0100 && r <= 0xe01ef:
		return true // variation selectors: invisible, they can carry data
	case r < 0xa0:
		return false
	}
	return unicode.Is(unicode.Cf, r)
}

// rightToLeft reports whether a display that lays text out in both
// directions would draw r right to left, and move what is around it.
func rightToLeft(r rune) bool {
	if r < 0x590 {
		return false // below Hebrew, nothing is
	}
	switch p, _ := bidi.LookupRune(r); p.Class() {
	case bidi.R, bidi.AL, bidi.AN:
		return true
	}
	return false
}

// String returns s with every hidden character escaped (see the package
// doc), for a page that draws every character left to right itself. A
// string with none is returned as it is.
func String(s string) string {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n <= 1) || hidden(r) {
			return string(appendEscaped(make([]byte, 0, len(s)+16), s, forPage))
		}
		i += n
	}
	return s
}

// ASCII returns s with every character outside printable ASCII escaped,
// newline and tab kept: what a signer is shown beside text that holds a
// character that can pass for another (a Cyrillic "а" for a Latin "a", a
// full-width digit), so that two requests that look alike never read
// alike. Inside a JSON string it is the same string again.
func ASCII(s string) string {
	if !NonASCII(s) && String(s) == s {
		return s
	}
	return string(appendEscaped(make([]byte, 0, len(s)+32), s, asASCII))
}

// NonASCII reports whether s holds any byte outside ASCII.
func NonASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return true
		}
	}
	return false
}

// mode says which characters appendEscaped escapes beyond the hidden ones.
type mode uint8

const (
	forPage     mode = iota // the hidden ones only (the page keeps its own order)
	forTerminal             // the right-to-left ones too
	asASCII                 // every one outside ASCII
)

// escapes reports whether r is escaped in mode m.
func (m mode) escapes(r rune) bool {
	switch {
	case hidden(r):
		return true
	case m == forTerminal:
		return rightToLeft(r)
	case m == asASCII:
		return r >= 0x80
	}
	return false
}

// appendEscaped appends s to b with every character mode m escapes
// escaped.
func appendEscaped(b []byte, s string, m mode) []byte {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b = append(b, `\x`...)
			b = appendHex(b, uint32(s[i]), 2)
		case m.escapes(r):
			if r > 0xffff {
				// As JSON writes it: a surrogate pair.
				hi, lo := utf16.EncodeRune(r)
				b = append(b, `\u`...)
				b = appendHex(b, uint32(hi), 4)
				b = append(b, `\u`...)
				b = appendHex(b, uint32(lo), 4)
			} else {
				b = append(b, `\u`...)
				b = appendHex(b, uint32(r), 4)
			}
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return b
}

func appendHex(b []byte, v uint32, width int) []byte {
	h := strconv.FormatUint(uint64(v), 16)
	for range width - len(h) {
		b = append(b, '0')
	}
	return append(b, h...)
}

// Writer is an [io.Writer], for a terminal, that escapes every hidden
// character and every right-to-left one of what is written through it
// before passing it on. A character split between two
// writes is held until the rest comes; [Writer.Flush] passes on what is
// held (a byte that never became a character, escaped).
type Writer struct {
	w    io.Writer
	held []byte // the start of a character the next write may finish
	buf  []byte
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it on. It reports len(p) when all of p was
// taken (passed on or held), whatever the escaping added.
func (v *Writer) Write(p []byte) (int, error) {
	s := p
	if len(v.held) > 0 {
		s = append(v.held, p...)
		v.held = nil
	}
	// Hold a trailing incomplete character: a later write may finish it.
	cut := len(s)
	for k := 1; k <= utf8.UTFMax-1 && k <= len(s); k++ {
		c := s[len(s)-k]
		if c < 0x80 {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(s[len(s)-k:]) {
				cut = len(s) - k
			}
			break
		}
	}
	v.buf = appendEscaped(v.buf[:0], string(s[:cut]), forTerminal)
	if cut < len(s) {
		v.held = append([]byte(nil), s[cut:]...)
	}
	if _, err := v.w.Write(v.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes on what is held of a character never finished, escaped.
func (v *Writer) Flush() error {
	if len(v.held) == 0 {
		return nil
	}
	b := appendEscaped(nil, string(v.held), forTerminal)
	v.held = nil
	_, err := v.w.Write(b)
	return err
}
