package driver

import (
	"context"
	"fmt"
	"testing"
)

// stackDeep recurses n frames of about 300 bytes each: a tool whose code
// runs deep (a client's encoding and transport), as a tool's stack does.
//
//go:noinline
func stackDeep(n int) int {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return int(pad[0])
	}
	return stackDeep(n-1) + int(pad[n%256])
}

// BenchmarkToolCall_GoroutineOrRunner: a tool call on a goroutine started
// for it ([aside], what every call did before a drive kept a runner) and
// on a drive's runner, for a tool that needs little stack and for one that
// needs about 16 KB and 60 KB (a new goroutine grows its stack from the
// smallest size again, copying it at each doubling).
func BenchmarkToolCall_GoroutineOrRunner(b *testing.B) {
	ctx := context.Background()
	for _, frames := range []int{0, 50, 200} {
		fn := func(context.Context) (string, error) { stackDeep(frames); return "ok", nil }
		b.Run(fmt.Sprintf("frames=%d/goroutine", frames), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := aside(ctx, "tool", fn); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("frames=%d/runner", frames), func(b *testing.B) {
			r := newRunner()
			defer r.stop()
			b.ReportAllocs()
			for range b.N {
				if _, kept, err := r.call(ctx, "tool", fn); err != nil || !kept {
					b.Fatal(kept, err)
				}
			}
		})
	}
}
