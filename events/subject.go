package events

import "fmt"

// MaxRunIDLen bounds a run id, which is one subject token.
const MaxRunIDLen = 128

// ValidRunID reports whether id can name a run: 1 to [MaxRunIDLen] ASCII
// letters, digits, '-' or '_'. That keeps a run id one NATS subject token
// and a JSON string that needs no escaping.
func ValidRunID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty run id", ErrMalformed)
	case len(id) > MaxRunIDLen:
		return fmt.Errorf("%w: run id of %d bytes (at most %d)", ErrMalformed, len(id), MaxRunIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !idByte(id[i]) {
			return fmt.Errorf("%w: run id %q: byte %d is %q (want letters, digits, '-' or '_')", ErrMalformed, id, i, id[i])
		}
	}
	return nil
}

func idByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}
