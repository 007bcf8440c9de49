package events

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxRunIDLen bounds a run id, which is one subject token.
const MaxRunIDLen = 128

// ValidRunID reports whether id can name a run: a single NATS subject token
// (no '.', '*', '>' or whitespace), valid UTF-8, at most [MaxRunIDLen] bytes.
func ValidRunID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty run id", ErrMalformed)
	case len(id) > MaxRunIDLen:
		return fmt.Errorf("%w: run id of %d bytes (at most %d)", ErrMalformed, len(id), MaxRunIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: run id %q is not UTF-8", ErrMalformed, id)
	case strings.ContainsAny(id, ".*> \t\r\n"):
		return fmt.Errorf("%w: run id %q holds one of . * > or whitespace", ErrMalformed, id)
	}
	return nil
}
