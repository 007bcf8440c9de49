//go:build unix

package embedded_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/embedded"
)

// TestStart_OneServerPerStore: a second server on a store in use is refused
// with an error naming the store and the process holding it, and nothing
// of the first is disturbed; once the first stops, the store can be opened
// again.
func TestStart_OneServerPerStore(t *testing.T) {
	dir := t.TempDir()
	first, err := embedded.Start(embedded.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Stop)

	second, err := embedded.Start(embedded.Config{Dir: dir})
	if err == nil {
		second.Stop()
		t.Fatal("a second server on a store in use: nil error")
	}
	for _, want := range []string{dir, "in use", "process " + strconv.Itoa(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !first.JetStreamEnabled() || !first.Running() {
		t.Fatal("the first server is no longer running JetStream after the refused second")
	}

	first.Stop()
	again, err := embedded.Start(embedded.Config{Dir: dir})
	if err != nil {
		t.Fatalf("start on the store after its server stopped: %v", err)
	}
	again.Stop()
	if _, err := os.Stat(filepath.Join(dir, "arbiter.lock")); err != nil {
		t.Errorf("lock file: %v", err)
	}
}

// TestStart_StoreThatCannotBeLocked: a store directory that cannot be
// created is a clear error, not a server without a lock.
func TestStart_StoreThatCannotBeLocked(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := embedded.Start(embedded.Config{Dir: filepath.Join(file, "store")})
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("start on a store under a file: got %v, want an error naming %s", err, file)
	}
}
