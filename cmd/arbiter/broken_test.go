package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/events"
)

// TestEvents_RollbackCopyIsReportedBroken: one unfenced copy of an earlier
// event of a run (a new id, its original position) used to make `arbiter
// events` say "hash chain verified" over a shorter history and `show` say
// COMPLETED. Both now say the run is BROKEN and exit non-zero (issue 10,
// item 1).
func TestEvents_RollbackCopyIsReportedBroken(t *testing.T) {
	e := newOpsEnv(t)
	e.pause(t, "run-a", `{"to":"ops"}`)
	recs := e.records(t, "run-a")
	copied := recs[1].Event
	copied.ID = events.NewID()
	data, err := copied.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(t.Context(), e.log.Subject("run-a", copied.Kind), data); err != nil {
		t.Fatal(err)
	}
	for name, run := range map[string]func() error{
		"events": func() error { return runEvents(t.Context(), e.args("run-a"), &bytes.Buffer{}) },
		"show":   func() error { return runShow(t.Context(), e.args("run-a"), &bytes.Buffer{}) },
	} {
		err := run()
		if err == nil || !strings.Contains(err.Error(), "run run-a is BROKEN") || exitCode(err) != 1 {
			t.Errorf("%s of a run with a rollback copy: %v, want it reported BROKEN (exit 1)", name, err)
		}
	}
}
