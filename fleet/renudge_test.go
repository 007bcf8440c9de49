package fleet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// workNudges returns the runs the work stream holds a nudge for.
func workNudges(t *testing.T, js jetstream.JetStream, q *fleet.Queue) []string {
	t.Helper()
	s, err := js.Stream(t.Context(), q.Config().WorkStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for subject := range info.State.Subjects {
		runs = append(runs, strings.TrimPrefix(subject, q.Config().WorkPrefix+"."))
	}
	slices.Sort(runs)
	return runs
}

// TestQueue_RenudgeAfterTheQueueInMemoryIsLost: a work stream kept in
// memory loses its nudges with its server; Renudge gives one to every run
// of every shard that has not ended (one created only, one waiting on an
// operator, one running), none to the ended ones, and workers then drive
// them on; the waiting one's expiry timer is armed again, so it expires.
func TestQueue_RenudgeAfterTheQueueInMemoryIsLost(t *testing.T) {
	js := testkit.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := fleet.Config{WorkInMemory: true}
	q, snaps, err := fleet.Setup(ctx, js.JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.JS.Stream(ctx, q.Config().WorkStream)
	if err != nil || s.CachedInfo().Config.Storage != jetstream.MemoryStorage {
		t.Fatalf("work stream: %v, want it in memory (%v)", s.CachedInfo().Config.Storage, err)
	}
	log := js.Log(t, events.Config{Shards: 2})
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	send := testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject)
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	// The one approval ("waits") expires 3s after it is asked for: no
	// worker armed its timer before the restart, so only the renudge's
	// worker can.
	d, err := driver.New(driver.Config{Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"), Tools: []driver.Tool{read, send, done}, ApprovalTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	agent := testkit.Counter{Tool: "read", Steps: 3}
	for _, id := range []string{"fresh", "ended", "failed", "waits", "midway"} {
		if err := q.Start(ctx, d, id, "count", nil); err != nil {
			t.Fatal(err)
		}
	}
	drive := func(id string, a driver.Agent) {
		r, err := d.Load(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Drive(ctx, r, a); err != nil {
			t.Fatal(err)
		}
	}
	drive("ended", agent)
	drive("waits", testkit.NewScript(testkit.Call("send", `{}`)))
	drive("failed", driver.AgentFunc(func(context.Context, driver.StepInput) (driver.Action, error) {
		return driver.Action{}, errors.New("the agent gives up")
	}))
	midway, err := d.Load(ctx, "midway")
	if err != nil {
		t.Fatal(err)
	}
	// Stopped after its first step, as a worker shutting down leaves it.
	stopped := make(chan struct{})
	first := driver.AgentFunc(func(context.Context, driver.StepInput) (driver.Action, error) {
		close(stopped)
		return testkit.Call("read", `{"n":1}`), nil
	})
	if err := d.DriveUntil(ctx, midway, first, stopped); !errors.Is(err, driver.ErrStopped) {
		t.Fatalf("midway: %v, want it stopped", err)
	}
	if v := midway.View(); v.Run.Status != projector.Running || v.Run.Steps != 1 {
		t.Fatalf("midway: %s after %d steps, want running after 1", v.Run.Status, v.Run.Steps)
	}
	// What the worker user could write on run subjects besides events: a
	// run.created that is not an event, and one under a subject naming no
	// valid run id. The first is nudged and given up by the worker as
	// unloadable; the second is no run's and is not nudged.
	if _, err := js.JS.Publish(ctx, log.Subject("garbage", events.RunCreated), []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", events.MaxRunIDLen+1)
	if _, err := js.JS.Publish(ctx, strings.Replace(log.Subject("placeholder", events.RunCreated), "placeholder", long, 1), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	// The server stops: the work stream in memory is gone with its nudges.
	if err := js.JS.DeleteStream(ctx, q.Config().WorkStream); err != nil {
		t.Fatal(err)
	}
	if q, snaps, err = fleet.Setup(ctx, js.JS, cfg); err != nil {
		t.Fatal(err)
	}
	if got := workNudges(t, js.JS, q); len(got) != 0 {
		t.Fatalf("nudges after the restart: %v, want none", got)
	}
	n, err := q.Renudge(ctx, log)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"fresh", "garbage", "midway", "waits"}
	if got := workNudges(t, js.JS, q); n != len(want) || !slices.Equal(got, want) {
		t.Fatalf("renudged %d: %v, want %v", n, got, want)
	}
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: q, Snapshots: snaps, Agents: map[string]driver.Agent{"count": agent}, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	go func() { _ = w.Run(wctx) }()
	t.Cleanup(stop)
	waitStatus(t, d, "fresh", projector.Completed)
	waitStatus(t, d, "midway", projector.Completed)
	if v := waitStatus(t, d, "waits", projector.Waiting); v.PendingApproval() == nil {
		t.Errorf("run waits: no pending approval")
	}
	if v := waitStatus(t, d, "waits", projector.Cancelled); v.Run.Reason != string(events.ReasonApprovalExpired) {
		t.Errorf("run waits ended %s, want %s: the worker arms the expiry timer again", v.Run.Reason, events.ReasonApprovalExpired)
	}
	// The garbage's nudge is given up, not retried for ever.
	for deadline := time.Now().Add(30 * time.Second); slices.Contains(workNudges(t, js.JS, q), "garbage"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the garbage run's nudge is still queued after 30s: %v", workNudges(t, js.JS, q))
		}
	}
}

// TestSetup_MovesTheWorkStreamToMemory: a work stream set up on disk by an
// earlier worker is made anew in memory when the config says so (a
// stream's storage cannot change in place), and back.
func TestSetup_MovesTheWorkStreamToMemory(t *testing.T) {
	js := testkit.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, mem := range []bool{false, true, true, false} {
		q, _, err := fleet.Setup(ctx, js.JS, fleet.Config{WorkInMemory: mem})
		if err != nil {
			t.Fatalf("setup (in memory %v): %v", mem, err)
		}
		s, err := js.JS.Stream(ctx, q.Config().WorkStream)
		if err != nil {
			t.Fatal(err)
		}
		want := jetstream.FileStorage
		if mem {
			want = jetstream.MemoryStorage
		}
		if got := s.CachedInfo().Config.Storage; got != want {
			t.Errorf("in memory %v: storage %v, want %v", mem, got, want)
		}
		if _, err := js.JS.Consumer(ctx, q.Config().WorkStream, q.Config().Consumer); err != nil {
			t.Errorf("in memory %v: the shared consumer: %v", mem, err)
		}
	}
}
