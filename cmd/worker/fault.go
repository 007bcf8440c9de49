//go:build arbiter_faults

package main

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/arbiter-run/arbiter/events"
)

// faultHook reads ARBITER_CRASH_BEFORE=<kind>[:<n>] from the environment:
// the worker kills itself with SIGKILL just before its n-th append (1 by
// default) of an event of that kind. The crash tests (faulttest) build the
// worker with `-tags arbiter_faults` to stop it at every append point of a
// step. Unset, it does nothing. The default build has nofault.go instead:
// a shipped worker never reads the variable.
func faultHook(logger *slog.Logger) func(events.Kind, any) {
	spec := os.Getenv("ARBITER_CRASH_BEFORE")
	if spec == "" {
		return nil
	}
	kind, nth, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(nth)
	if err != nil || n < 1 {
		n = 1
	}
	logger.Warn("fault injection armed: will SIGKILL before an append", "kind", kind, "n", n)
	var seen atomic.Int64
	return func(k events.Kind, _ any) {
		if string(k) == kind && seen.Add(1) == int64(n) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
}
