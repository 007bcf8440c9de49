package replay

import (
	"bytes"

	"github.com/arbiter-run/arbiter/events"
)

// specHash is the hash the driver records for a tool spec.
func specHash(s events.ToolSpec) (string, error) { return events.HashToolSpec(s) }

func sameSpec(a, b events.ToolSpec) bool {
	return a.Name == b.Name && a.Description == b.Description && bytes.Equal(a.Schema, b.Schema) &&
		a.SideEffect == b.SideEffect && a.TimeoutMS == b.TimeoutMS && a.Terminal == b.Terminal && a.Hash == b.Hash
}

// maxSpecCache bounds the specs remembered across runs as verified: most
// fleets record a handful of distinct specs in every run, and hashing each
// one again for every run would cost more than the rest of a run.created.
const maxSpecCache = 1024

// verifiedSpec reports whether s's content hashes to its recorded Hash.
func (c *checker) verifiedSpec(s events.ToolSpec) bool {
	if known, ok := c.specs[s.Hash]; ok && sameSpec(known, s) {
		return true
	}
	h, err := specHash(s)
	if err != nil || h != s.Hash {
		return false
	}
	if len(c.specs) < maxSpecCache {
		c.specs[s.Hash] = s
	}
	return true
}
