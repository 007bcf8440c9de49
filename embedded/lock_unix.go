//go:build unix

package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockName is the lock file in a store's directory.
const lockName = "arbiter.lock"

// lockStore takes an exclusive lock on dir (creating it), so that no second
// server, in this process or another, opens the same store: two servers
// writing one JetStream store corrupt it. The lock goes with the returned
// file: closing it, or the process ending, releases it.
func lockStore(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("store %s: %w", dir, err)
	}
	name := filepath.Join(dir, lockName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			who := "another server"
			if pid := strings.TrimSpace(string(holder)); pid != "" {
				who += " (process " + pid + ")"
			}
			return nil, fmt.Errorf("%w: store %s is in use by %s: one store, one server (lock %s)", ErrStoreInUse, dir, who, name)
		}
		return nil, fmt.Errorf("lock store %s: %w", dir, err)
	}
	// Who holds it, for the next one's error message.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
