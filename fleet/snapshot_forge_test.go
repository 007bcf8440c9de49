package fleet_test

import (
	"bytes"
	"encoding/json"
	"github.com/arbiter-run/arbiter/internal/bucket"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/scripted"
)

// lockedBuffer is a log destination safe for a worker's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestFleet_CraftedSnapshotNeverResumesAConsumedGrant goes through the path
// the review used (issue 10, item 3): a snapshot written to the snapshot
// bucket (what the worker NATS user may write), whose tail is the log's own
// but whose view puts the first, consumed grant on the second approval of
// the same request. A worker with nothing of the run in memory loads the
// snapshot, folds the run from its events before it settles anything, logs
// that the snapshot disagreed, and the second send does not run.
func TestFleet_CraftedSnapshotNeverResumesAConsumedGrant(t *testing.T) {
	f := newApprovalFleet(t, 0)
	f.agent = scripted.Agent{Decisions: []driver.Action{
		scripted.Call("send", `{"to":"ops"}`), scripted.Call("send", `{"to":"ops"}`), scripted.Call("done", `{}`),
	}}
	d, q, _ := f.member(t)
	const run = "run-forged-snapshot"
	r, err := d.Create(t.Context(), run, "script", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Drive(t.Context(), r, f.agent); err != nil {
		t.Fatal(err)
	}
	v0 := r.View()
	first := *v0.PendingApproval()
	f.grant(t, d.Log(), run, first)
	if err := d.Drive(t.Context(), r, f.agent); err != nil {
		t.Fatal(err)
	}
	v := r.View()
	second := v.PendingApproval()
	if f.send.Count() != 1 || second == nil || second.Hash != first.Hash {
		t.Fatalf("before the forgery: %d sends, pending %+v; want 1 and a second approval of the same request", f.send.Count(), second)
	}
	consumed := *v.Approval(first.ID)
	forged := v.Clone()
	a := forged.Approval(second.ID)
	a.ID, a.State, a.Decision, a.DecisionEvent = first.ID, projector.Granted, consumed.Decision, consumed.DecisionEvent
	forged.Approval(first.ID).ID = "elsewhere"
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"tail": r.Tail(), "view": forged}); err != nil {
		t.Fatal(err)
	}
	// Written as a worker writes a snapshot (the worker user may): the
	// driver's own checks are what must refuse it.
	if _, err := bucket.New(f.js.JS, "ARB_VIEWS").Put(t.Context(), run, buf.Bytes()); err != nil {
		t.Fatal(err)
	}

	logs := &lockedBuffer{}
	f.cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	wd, wq, ws := f.member(t)
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: wd, Queue: wq, Snapshots: ws, Agents: map[string]driver.Agent{"": f.agent},
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	if err := q.Nudge(t.Context(), run, "after-forgery"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(logs.String(), "snapshot disagrees with the run's events"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never reported the forged snapshot (send executed %d times); its log:\n%s", f.send.Count(), logs.String())
		}
	}
	if got := f.send.Count(); got != 1 {
		t.Errorf("send executed %d times after the forged snapshot, want 1", got)
	}
	recs, _, err := d.Log().Read(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.Event.Kind == events.StepPolicy && strings.Contains(string(rec.Event.Body), `"consumes"`) && strings.Contains(string(rec.Event.Body), `"step":2`) {
			t.Errorf("step 2 consumed a grant: %s", rec.Event.Body)
		}
	}
}
