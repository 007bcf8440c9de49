package jsonform

import (
	"strconv"
	"unicode/utf8"
)

// plain marks the bytes a string may contain literally that need no further
// thought: printable ASCII other than '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// stringValue parses a string value at p.pos and, in emit mode, writes its
// canonical form.
func (p *parser) stringValue() *Error {
	if !p.emit {
		_, _, err := p.str(false)
		return err
	}
	mark := len(p.arena)
	s, escaped, err := p.str(true)
	if err != nil {
		return err
	}
	p.out = appendString(p.out, s, escaped)
	p.arena = p.arena[:mark]
	return nil
}

// str scans the string whose opening quote is at p.pos and leaves p.pos
// after its closing quote. When decode is set it returns the unescaped
// content: a subslice of the input when the string has no escapes (escaped
// is false), otherwise bytes appended to p.arena. The result must not be
// appended to.
func (p *parser) str(decode bool) (s []byte, escaped bool, err *Error) {
	in, open := p.in, p.pos
	i := open + 1
	for i < len(in) {
		c := in[i]
		switch {
		case plain[c]:
			i++
		case c == '"':
			p.pos = i + 1
			return in[open+1 : i], false, nil
		case c == '\\':
			return p.strEscaped(open, i, decode)
		default:
			n, err := rawChar(in, i)
			if err != nil {
				return nil, false, err
			}
			i += n
		}
	}
	return nil, false, unterminated(in, open)
}

// strEscaped continues str from the first backslash at i.
func (p *parser) strEscaped(open, i int, decode bool) ([]byte, bool, *Error) {
	in := p.in
	mark := len(p.arena)
	if decode {
		p.arena = append(p.arena, in[open+1:i]...)
	}
	for i < len(in) {
		c := in[i]
		n := 1
		switch {
		case plain[c]:
			for i+n < len(in) && plain[in[i+n]] {
				n++
			}
		case c == '"':
			p.pos = i + 1
			return p.arena[mark:len(p.arena):len(p.arena)], true, nil
		case c == '\\':
			var err *Error
			if n, err = p.escape(i, decode); err != nil {
				return nil, false, err
			}
			i += n
			continue
		default:
			var err *Error
			if n, err = rawChar(in, i); err != nil {
				return nil, false, err
			}
		}
		if decode {
			p.arena = append(p.arena, in[i:i+n]...)
		}
		i += n
	}
	return nil, false, unterminated(in, open)
}

// unterminated reports a string opened at open that never closes.
func unterminated(in []byte, open int) *Error {
	return errAt(len(in), ErrSyntax, "unterminated string opened at byte "+strconv.Itoa(open))
}

// rawChar checks the literal byte at in[i], which is a control character
// or starts a multi-byte sequence, and returns the length of its UTF-8
// encoding.
func rawChar(in []byte, i int) (int, *Error) {
	c := in[i]
	if c < 0x20 {
		return 0, errAt(i, ErrSyntax, "raw control character "+hexByte(c)+" in string")
	}
	r, n := utf8.DecodeRune(in[i:])
	if r == utf8.RuneError && n == 1 {
		return 0, invalidUTF8(c, i)
	}
	return n, nil
}

// escape handles the escape sequence whose backslash is at i, appending the
// character it stands for to p.arena when decode is set. It returns the
// length of the sequence.
func (p *parser) escape(i int, decode bool) (int, *Error) {
	in := p.in
	if i+1 >= len(in) {
		return 0, errAt(len(in), ErrSyntax, "unterminated escape sequence")
	}
	var c byte
	switch e := in[i+1]; e {
	case '"', '\\', '/':
		c = e
	case 'b':
		c = '\b'
	case 'f':
		c = '\f'
	case 'n':
		c = '\n'
	case 'r':
		c = '\r'
	case 't':
		c = '\t'
	case 'u':
		return p.escapeU(i, decode)
	default:
		if e < utf8.RuneSelf {
			return 0, errAt(i, ErrSyntax, "invalid escape '\\"+string(rune(e))+"'")
		}
		return 0, errAt(i, ErrSyntax, "invalid escape: byte "+hexByte(e)+" after '\\'")
	}
	if decode {
		p.arena = append(p.arena, c)
	}
	return 2, nil
}

// escapeU handles a \uXXXX escape at i, pairing surrogates.
func (p *parser) escapeU(i int, decode bool) (int, *Error) {
	in := p.in
	r, ok := hex4(in, i+2)
	if !ok {
		return 0, errAt(i, ErrSyntax, `invalid \u escape, expected four hex digits`)
	}
	n := 6
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return 0, loneSurrogate(in, i, "low surrogate without a preceding high surrogate")
	case r >= 0xD800 && r <= 0xDBFF:
		if i+7 >= len(in) || in[i+6] != '\\' || in[i+7] != 'u' {
			return 0, loneSurrogate(in, i, "high surrogate not followed by a low surrogate")
		}
		lo, ok := hex4(in, i+8)
		if !ok {
			return 0, errAt(i+6, ErrSyntax, `invalid \u escape, expected four hex digits`)
		}
		if lo < 0xDC00 || lo > 0xDFFF {
			return 0, loneSurrogate(in, i, "high surrogate not followed by a low surrogate")
		}
		r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
		n = 12
	}
	if decode {
		p.arena = utf8.AppendRune(p.arena, r)
	}
	return n, nil
}

// loneSurrogate reports the surrogate escape at i.
func loneSurrogate(in []byte, i int, why string) *Error {
	return errAt(i, ErrLoneSurrogate, "escaped surrogate "+string(in[i:i+6])+" outside a pair: "+why)
}

// hex4 decodes the four hex digits at in[j:j+4].
func hex4(in []byte, j int) (rune, bool) {
	if j+4 > len(in) {
		return 0, false
	}
	var r rune
	for _, c := range in[j : j+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}

// appendString appends s as a canonical JSON string. s is unescaped
// content; when escaped is false it is known to contain no byte that needs
// escaping (it came straight from the input without escapes).
func appendString(dst, s []byte, escaped bool) []byte {
	dst = append(dst, '"')
	if !escaped {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	run := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[run:i]...)
		dst = appendEscape(dst, c)
		run = i + 1
	}
	dst = append(dst, s[run:]...)
	return append(dst, '"')
}

// appendEscape appends the escape JSON requires for c, which is '"', '\\'
// or a control character.
func appendEscape(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	const digits = "0123456789abcdef"
	return append(dst, '\\', 'u', '0', '0', digits[c>>4], digits[c&0xf])
}
