package gateway_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/gateway"
	"github.com/arbiter-run/arbiter/mcp"
)

func TestLoadFile_RefusesWhatCannotWork(t *testing.T) {
	for _, c := range []struct{ name, yaml, want string }{
		{"unknown field", "mcp: {lock: l, servers: [{name: fs, command: x}]}\nwiat: 1s\n", "line 2"},
		{"no server", "mcp: {lock: l}\n", "mcp.servers"},
		{"bad wait", "mcp: {lock: l, servers: [{name: fs, command: x}]}\nwait: soon\n", `wait: "soon"`},
		{"bad outcome", "mcp: {lock: l, servers: [{name: fs, command: x}]}\npolicy: {side_effects: {read_only: maybe}}\n", "read_only"},
		{"bad operator", "mcp: {lock: l, servers: [{name: fs, command: x}]}\noperators: {nope: alice}\n", "operators"},
		{"bad limit", "mcp: {lock: l, servers: [{name: fs, command: x}]}\nlimits: {max_steps: -2}\n", "max_steps -2"},
		{"bad elapsed", "mcp: {lock: l, servers: [{name: fs, command: x}]}\nlimits: {max_elapsed: forever}\n", "max_elapsed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gateway.yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := gateway.LoadFile(path)
			if !errors.Is(err, gateway.ErrConfig) && !errors.Is(err, mcp.ErrConfig) {
				t.Fatalf("got %v, want a config error", err)
			}
			if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %q, want it to name %s and %q", err, path, c.want)
			}
		})
	}
}

func TestLoadFile_LockIsRelativeToTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, []byte("mcp: {lock: tools.lock, servers: [{name: fs, command: x}]}\nwait: 2s\napproval_ttl: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := gateway.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.MCP.Lock != filepath.Join(dir, "tools.lock") {
		t.Fatalf("lock: %s", f.MCP.Lock)
	}
	if ttl, wait := f.Durations(); ttl.String() != "1h0m0s" || wait.String() != "2s" {
		t.Fatalf("durations: %s %s", ttl, wait)
	}
}

// The example in docs loads, with the limits it sets.
func TestLoadFile_TheExampleLoads(t *testing.T) {
	f, err := gateway.LoadFile("../docs/examples/mcp-gateway/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l, err := f.Limits.Limits()
	if err != nil || l.MaxSteps != 1000 || l.MaxRepeats != 20 {
		t.Fatalf("the example's limits: %+v, %v; want 1000 steps and 20 repeats", l, err)
	}
}
