package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/arbiter-run/arbiter/internal/bucket"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSnapshots_AreOnlyACache: a snapshot that chains onto the log is
// used; one that does not (altered, or ahead of the log) is dropped and the
// run folded from its events, giving the same view.
func TestSnapshots_AreOnlyACache(t *testing.T) {
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
	// Written as a worker writes a snapshot: what Load must still check.
	if _, err := bucket.New(e.js.JS, e.q.Config().SnapshotBucket).Put(ctx, "snap", bad); err != nil {
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

// TestWorker_SnapshotsAreOptional: a worker given Snapshots saves the view
// of a run it gives back (here, waiting on an approval); one given none
// saves nothing, and the run is the same either way.
func TestWorker_SnapshotsAreOptional(t *testing.T) {
	for name, keep := range map[string]bool{"with": true, "without": false} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, fleet.Config{})
			send := testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject)
			d := e.driver(t, send)
			cfg := fleet.WorkerConfig{Driver: d, Queue: e.q, Agents: map[string]driver.Agent{
				"s": scripted.Agent{Decisions: []driver.Action{scripted.Call("send", `{}`)}},
			}}
			if keep {
				cfg.Snapshots = e.s
			}
			w, err := fleet.NewWorker(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { defer close(done); _ = w.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
			if err := e.q.Start(ctx, d, "held", "s", nil); err != nil {
				t.Fatal(err)
			}
			v := waitStatus(t, d, "held", projector.Waiting)
			// Once Run has returned, the worker is done with every run it
			// held, and whatever it saves is saved.
			cancel()
			<-done
			kv, err := e.js.JS.KeyValue(t.Context(), e.q.Config().SnapshotBucket)
			if err != nil {
				t.Fatal(err)
			}
			got, err := kv.Get(t.Context(), "held")
			switch {
			case keep && err != nil:
				t.Fatalf("with Snapshots: no snapshot of the waiting run: %v", err)
			case keep:
				var s struct {
					View projector.View `json:"view"`
				}
				if err := json.Unmarshal(got.Value(), &s); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(s.View, v) {
					t.Errorf("snapshot's view differs from the run's:\n got %+v\nwant %+v", s.View, v)
				}
			case !errors.Is(err, jetstream.ErrKeyNotFound):
				t.Fatalf("without Snapshots: got %v, want jetstream.ErrKeyNotFound (no snapshot saved)", err)
			}
			if n := send.Count(); n != 0 {
				t.Errorf("send executed %d times before a grant, want 0", n)
			}
		})
	}
}

// TestSnapshots_NewSnapshotsDoesNoIO: NewSnapshots looks its bucket up on
// first use. Where nobody created it, Save fails naming it and Load folds
// the run from its events; once set up, the same store saves and loads.
func TestSnapshots_NewSnapshotsDoesNoIO(t *testing.T) {
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	cfg := fleet.Config{SnapshotBucket: "LATE_VIEWS"}
	snaps := fleet.NewSnapshots(js.JS, cfg) // before the bucket exists
	d, err := driver.New(driver.Config{Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "se")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	r, err := d.Create(ctx, "late", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snaps.Save(ctx, r); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("save with no bucket: got %v, want jetstream.ErrBucketNotFound", err)
	}
	if _, from, err := snaps.Load(ctx, d, "late"); err != nil || from {
		t.Fatalf("load with no bucket: from snapshot %v, %v; want the run folded from its events", from, err)
	}
	if _, _, err := fleet.Setup(ctx, js.JS, cfg); err != nil {
		t.Fatal(err)
	}
	if err := snaps.Save(ctx, r); err != nil {
		t.Fatalf("save once set up: %v", err)
	}
	got, from, err := snaps.Load(ctx, d, "late")
	if err != nil || !from {
		t.Fatalf("load once set up: from snapshot %v, %v", from, err)
	}
	if !reflect.DeepEqual(got.View(), r.View()) {
		t.Errorf("view from the snapshot differs:\n got %+v\nwant %+v", got.View(), r.View())
	}
}

// TestWorker_NewRunLooksUpNoSnapshot: the first delivery of a run's
// creation nudge is driven from the run's events without a look in the
// snapshot store (nobody has driven the run, so nobody saved one); a later
// nudge of the same run, taken by a worker that does not hold it, looks
// its snapshot up. A second client of the server, subscribed to the
// store's read subjects, sees each look-up.
func TestWorker_NewRunLooksUpNoSnapshot(t *testing.T) {
	e := newEnv(t, fleet.Config{})
	send := testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject)
	d := e.driver(t, send)
	spy, err := e.js.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spy.Close)
	bucket := e.q.Config().SnapshotBucket
	looks := make(chan string, 64)
	for _, subj := range []string{"$JS.API.DIRECT.GET.KV_" + bucket + ".>", "$JS.API.DIRECT.GET.KV_" + bucket, "$JS.API.STREAM.MSG.GET.KV_" + bucket} {
		if _, err := spy.Subscribe(subj, func(m *nats.Msg) { looks <- m.Subject + " " + string(m.Data) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	work := func(t *testing.T) (stop func()) {
		w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: e.q, Snapshots: e.s, Agents: map[string]driver.Agent{
			"s": scripted.Agent{Decisions: []driver.Action{scripted.Call("send", `{}`)}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return runWorker(t, w)
	}
	count := func() (n int) {
		for {
			select {
			case l := <-looks:
				if strings.Contains(l, "fresh") {
					n++
				}
			default:
				return n
			}
		}
	}
	stop := work(t)
	if err := e.q.Start(t.Context(), d, "fresh", "s", nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, d, "fresh", projector.Waiting)
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("the new run's first drive looked its snapshot up %d times, want 0", n)
	}
	// Another worker, which does not hold the run in memory, takes its
	// next nudge.
	stop()
	stop = work(t)
	if err := e.q.Nudge(t.Context(), "fresh", "again"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := spy.Flush(); err != nil {
			t.Fatal(err)
		}
		if n := count(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no snapshot look-up in 20 s for a nudge that is not the run's first")
		}
	}
	// A nudge from another client whose id claims a creation, taken by a
	// third worker that does not hold the run either: it skips the
	// snapshot and reads the run from its events, and the run is as it was.
	stop()
	work(t)
	before, err := d.Log().Tail(t.Context(), "fresh")
	if err != nil {
		t.Fatal(err)
	}
	cons, err := e.js.JS.Consumer(t.Context(), e.q.Config().WorkStream, e.q.Config().Consumer)
	if err != nil {
		t.Fatal(err)
	}
	// The run's earlier nudge must be settled first: the second worker may
	// have handed it back when it stopped, and while the queue holds a
	// nudge for the run it discards another (one a run), so the forged
	// one would never be stored.
	var info *jetstream.ConsumerInfo
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if info, err = cons.Info(t.Context()); err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's earlier nudge was not settled: %+v", info)
		}
	}
	taken := info.Delivered.Consumer
	forged := nats.NewMsg(e.q.Config().WorkPrefix + ".fresh")
	forged.Header.Set(jetstream.MsgIDHeader, "forged/created")
	if err := spy.PublishMsg(forged); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info, err := cons.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.Delivered.Consumer > taken && info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the forged nudge was not settled: %+v", info)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Errorf("a nudge claiming a creation looked the snapshot up %d times, want 0", n)
	}
	if after, err := d.Log().Tail(t.Context(), "fresh"); err != nil || after != before {
		t.Errorf("after the forged nudge the run's tail is %+v (%v), want %+v", after, err, before)
	}
	waitStatus(t, d, "fresh", projector.Waiting)
}

// TestWorker_EndedRunsNudgeIsAcked: the nudge of a run the worker drove to
// its end is acknowledged (without waiting for the server's confirmation)
// and stays so: the consumer holds nothing pending and delivers it once,
// past the point where an unacknowledged nudge would have come back.
func TestWorker_EndedRunsNudgeIsAcked(t *testing.T) {
	e := newEnv(t, fleet.Config{AckWait: time.Second})
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	d := e.driver(t, read, testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal())
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: e.q, Snapshots: e.s, Agents: map[string]driver.Agent{
		"s": scripted.Agent{Decisions: []driver.Action{scripted.Call("read", `{}`), scripted.Call("done", `{}`)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, w)
	if err := e.q.Start(t.Context(), d, "ends", "s", nil); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, d, "ends", projector.Completed)
	cons, err := e.js.JS.Consumer(t.Context(), e.q.Config().WorkStream, e.q.Config().Consumer)
	if err != nil {
		t.Fatal(err)
	}
	settled := time.Time{}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := cons.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.Delivered.Consumer > 1 {
			t.Fatalf("the ended run's nudge was delivered %d times", info.Delivered.Consumer)
		}
		if info.NumAckPending == 0 && info.NumPending == 0 && settled.IsZero() {
			settled = time.Now()
		}
		// Two ack waits after it settled: an ack the server never took
		// would have brought the nudge back by then.
		if !settled.IsZero() && time.Since(settled) > 2*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ended run's nudge was not settled: %+v", info)
		}
	}
}
