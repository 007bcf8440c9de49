package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/testkit"
)

var moreLine = regexp.MustCompile(`more: arbiter runs --after (\S+)`)

// TestRuns_PagesWithFilters: `arbiter runs` lists newest first, pages with
// --after, and filters by status and agent.
func TestRuns_PagesWithFilters(t *testing.T) {
	e := newOpsEnv(t)
	for _, run := range []string{"r1", "r2", "r3"} {
		r, err := e.d.Create(t.Context(), run, "batch", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.d.Drive(t.Context(), r, testkit.NewScript(testkit.Call("done", `{}`))); err != nil {
			t.Fatal(err)
		}
	}
	e.pause(t, "w1", `{"to":"ops"}`)
	var out bytes.Buffer
	if err := runRuns(t.Context(), e.args("--page", "2"), &out); err != nil {
		t.Fatal(err)
	}
	first := out.String()
	m := moreLine.FindStringSubmatch(first)
	if m == nil || !strings.Contains(first, "w1") || !strings.Contains(first, "r3") || strings.Contains(first, "r2") {
		t.Fatalf("first page of 2:\n%s", first)
	}
	out.Reset()
	if err := runRuns(t.Context(), e.args("--page", "2", "--after", m[1]), &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "r2") || !strings.Contains(s, "r1") || strings.Contains(s, "r3") || strings.Contains(s, "more:") {
		t.Errorf("second page:\n%s", s)
	}
	out.Reset()
	if err := runRuns(t.Context(), e.args("--status", "WAITING_FOR_APPROVAL"), &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "w1") || strings.Contains(s, "r1") {
		t.Errorf("waiting runs:\n%s", s)
	}
	out.Reset()
	if err := runRuns(t.Context(), e.args("--agent", "batch", "--status", "COMPLETED"), &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Count(s, "COMPLETED") != 3 || strings.Contains(s, "w1") {
		t.Errorf("completed runs of agent batch:\n%s", s)
	}
	if err := runRuns(t.Context(), e.args("--since", "yesterday"), &out); !errors.As(err, new(usageError)) {
		t.Errorf("--since yesterday: %v, want a usage error", err)
	}
	if err := runRuns(t.Context(), e.args("--status", "DONE"), &out); err == nil || !strings.Contains(err.Error(), `"DONE"`) {
		t.Errorf("--status DONE: %v, want an error naming it", err)
	}
}

// TestEvents_Follow: `events RUN --follow` prints the events stored after
// it started and returns when the run ends.
func TestEvents_Follow(t *testing.T) {
	e := newOpsEnv(t)
	a := e.pause(t, "run-f", `{"to":"ops"}`)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- runEvents(ctx, e.args("run-f", "--follow"), &out) }()
	waitLine(t, &out, "approval.requested")
	if err := runGrant(t.Context(), e.args("run-f", a.ID, "--key", e.key, "--yes"), io.Discard); err != nil {
		t.Fatal(err)
	}
	r, err := e.d.Load(t.Context(), "run-f")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.Drive(t.Context(), r, e.agent(`{"to":"ops"}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("events --follow did not return when the run ended")
	}
	for _, want := range []string{"approval.granted", "step.observed", "run.finished"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("followed output lacks %s:\n%s", want, out.String())
		}
	}
}
