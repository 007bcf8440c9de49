package fleet_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestQueue_NudgesAreDeduplicated: a run has at most one nudge waiting,
// however often it is nudged, and a second nudge is not an error.
func TestQueue_NudgesAreDeduplicated(t *testing.T) {
	js := testkit.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q, _, err := fleet.Setup(ctx, js.JS, fleet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, why := range []string{"created", "created", "decided-1", "moved-3"} {
		if err := q.Nudge(ctx, "r1", why); err != nil {
			t.Fatalf("nudge %s: %v", why, err)
		}
	}
	if err := q.Nudge(ctx, "r2", "created"); err != nil {
		t.Fatal(err)
	}
	s, err := js.JS.Stream(ctx, q.Config().WorkStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("work stream holds %d nudges, want 2 (one per run)", info.State.Msgs)
	}
	if _, _, err := fleet.Setup(ctx, js.JS, fleet.Config{}); err != nil {
		t.Errorf("second Setup: %v, want it idempotent", err)
	}
	if err := (fleet.Config{AckWait: time.Millisecond}).Validate(); err == nil {
		t.Error("an ack wait of 1ms: got nil error")
	}
}

// TestQueue_SnapshotIsOnlyACache: a snapshot that chains onto the log is
// used; one that does not (altered, or ahead of the log) is dropped and the
// run folded from its events, giving the same view.
func TestQueue_SnapshotIsOnlyACache(t *testing.T) {
	e := newEnv(t, fleet.Config{})
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	d := e.driver(t, read)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := d.Create(ctx, "snap", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Characters HTML escaping would change, in the arguments the view holds.
	agent := scripted.Agent{Decisions: []driver.Action{scripted.Call("read", `{"q":"a && <b>"}`)}}
	if err := d.Drive(ctx, r, agent); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, fromSnap, err := e.s.Load(ctx, d, "snap")
	if err != nil || !fromSnap {
		t.Fatalf("load with a good snapshot: from snapshot %v, %v", fromSnap, err)
	}
	if !reflect.DeepEqual(got.View(), r.View()) {
		t.Errorf("view from the snapshot differs from the driver's:\n got %+v\nwant %+v", got.View(), r.View())
	}

	kv, err := e.js.JS.KeyValue(ctx, e.q.Config().SnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(ctx, "snap")
	if err != nil {
		t.Fatal(err)
	}
	var snap map[string]json.RawMessage
	if err := json.Unmarshal(entry.Value(), &snap); err != nil {
		t.Fatal(err)
	}
	snap["tail"] = json.RawMessage(`{"seq":1,"count":1,"hash":"00"}`)
	bad, _ := json.Marshal(snap)
	if _, err := kv.Put(ctx, "snap", bad); err != nil {
		t.Fatal(err)
	}
	got, fromSnap, err = e.s.Load(ctx, d, "snap")
	if err != nil || fromSnap {
		t.Fatalf("load with a snapshot that does not chain: from snapshot %v, %v; want the events folded", fromSnap, err)
	}
	if !reflect.DeepEqual(got.View(), r.View()) {
		t.Errorf("view folded from the events differs from the driver's")
	}
	if got.View().Run.Status != projector.Failed { // the script ran out
		t.Errorf("status %s", got.View().Run.Status)
	}
}
