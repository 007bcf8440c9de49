//go:build !arbiter_faults

package main

import (
	"log/slog"

	"github.com/arbiter-run/arbiter/events"
)

// faultHook is nil in the default build: fault injection (fault.go) is only
// in a worker built with `-tags arbiter_faults`, which the crash tests do,
// so a shipped worker ignores ARBITER_CRASH_BEFORE
// (faulttest.TestWorker_DefaultBuildIgnoresCrashBefore).
func faultHook(*slog.Logger) func(events.Kind, any) { return nil }
