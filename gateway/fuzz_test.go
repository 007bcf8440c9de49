package gateway_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbiter-run/arbiter/gateway"
	"github.com/arbiter-run/arbiter/mcp"
)

// FuzzLoadFile holds that any file either loads or is refused with a
// config error naming it; it never panics.
func FuzzLoadFile(f *testing.F) {
	f.Add([]byte("mcp: {lock: l, servers: [{name: fs, command: x}]}\nwait: 2s\n"))
	f.Add([]byte("mcp: {lock: l, servers: [{name: fs, url: 'http://127.0.0.1:1/'}]}\npolicy: {side_effects: {read_only: allow}}\n"))
	f.Add([]byte("operators: {U: x}\n"))
	f.Add([]byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "gateway.yaml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := gateway.LoadFile(path)
		if err != nil && !errors.Is(err, gateway.ErrConfig) && !errors.Is(err, mcp.ErrConfig) {
			t.Fatalf("got %v, want nil or a config error", err)
		}
	})
}
