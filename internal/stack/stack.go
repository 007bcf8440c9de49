// Package stack grows a goroutine's stack ahead of deep work.
package stack

// Grow grows the calling goroutine's stack to the 32 KB a drive needs, in
// one step, while the stack is still shallow. A goroutine that has just
// started (an MCP server's handler, a worker's run) would otherwise grow
// it from 2 KB by doubling as a drive goes deeper (the driver, the policy,
// the schema check, the log's publish), and each doubling copies the
// whole stack and walks every frame on it to move its pointers: 15-20 µs
// a call through the gateway, against about 5 µs for this one growth
// (docs/performance.md, "Gate and gateway"). A 16 KB stack is not enough
// for a drive. The frame is 16 KB: with the caller's frames above it the
// runtime takes the next size up that fits, 32 KB. On a stack already
// that large it only zeroes its frame. (CockroachDB's util/growstack does
// the same for its storage paths.)
func Grow() { grow(0) }

//go:noinline
func grow(i int) byte {
	var b [16 << 10]byte
	return b[i%len(b)]
}
