// Package approvals owns what makes an approval trustworthy: the approval
// hash that binds it to the exact request, operator decisions signed with
// ed25519 keys (NATS nkeys), their verification against the configured
// operators, and the API subscribers use to watch approval events.
//
// It must not execute tools or drive runs: acting on a verified grant is the
// driver's job, and consuming it is one fenced append there.
package approvals

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/arbiter-run/arbiter/events"
)

// hashDomain separates approval hashes from every other SHA-256 the project
// computes. The encoding is documented in docs/adr/0004-approval-hash.md.
const hashDomain = "arbiter.approval.v1"

// Hash returns the approval hash (hex SHA-256): netstrings of the domain, the
// approval kind, the capability, the presentation, the tool's name, the tool
// spec's hash and the request's arguments, in that order. capability,
// presentation and args must already be in PolicyJSON form. Any change to any
// of them changes the hash, so a changed request can never inherit a grant.
func Hash(kind string, capability, presentation []byte, tool events.ToolSpec, args []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{
		[]byte(hashDomain), []byte(kind), capability, presentation,
		[]byte(tool.Name), []byte(tool.Hash), args,
	} {
		h.Write(netstring(part))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// netstring encodes b as "<decimal length>:<bytes>,".
func netstring(b []byte) []byte {
	out := strconv.AppendInt(nil, int64(len(b)), 10)
	out = append(out, ':')
	out = append(out, b...)
	return append(out, ',')
}
