package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestCluster_StreamLeaderLossLosesNothing runs 50 runs on a 3-node
// JetStream cluster in this process with R3 streams, driven by three
// in-process workers on their own connections, and shuts down the server
// leading the runs stream while the runs are in flight. Every run must
// complete, every event whose publish was acknowledged must be in the log
// afterwards, and no call may execute twice (the tool is a side effect with
// a reconcile hook: a call whose observation was lost is reconciled, never
// repeated).
func TestCluster_StreamLeaderLossLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster: skipped with -short")
	}
	const runs, workSteps = 50, 4
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	servers := testkit.Cluster(t, 3)
	ecfg := events.Config{Replicas: 3}
	fcfg := fleet.Config{Replicas: 3, AckWait: 3 * time.Second}
	acks := &ackRecorder{ids: map[string]bool{}}
	var appended, failed atomic.Int64
	onAppend := func(_ events.Kind, _ any, _ time.Duration, err error) {
		if err != nil {
			failed.Add(1)
		} else {
			appended.Add(1)
		}
	}

	setup := testkit.ConnectCluster(t, servers)
	// testkit.Cluster returns once there is a meta leader; an R3 stream
	// can be placed only once every peer has joined it.
	var log *events.Log
	var q *fleet.Queue
	if err := retry(ctx, 20*time.Second, func() (err error) {
		if log, err = events.Open(ctx, ackJS{setup.JS, acks}, ecfg); err != nil {
			return err
		}
		q, _, err = fleet.Setup(ctx, setup.JS, fcfg)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	work := newOnceTool("work", false)
	done := newOnceTool("done", true)
	tools := []driver.Tool{work, done}
	pol := policy.WithID(policy.SideEffectPolicy{events.LocalMutation: events.Allow}, "cluster-allow")
	agent := driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
		n := in.Steps.Len() + 1
		args := fmt.Sprintf(`{"run":%q,"step":%d}`, in.Run.ID, n)
		if n > workSteps {
			return driver.Action{Tool: "done", Args: json.RawMessage(args)}, nil
		}
		return driver.Action{Tool: "work", Args: json.RawMessage(args)}, nil
	})
	creator, err := driver.New(driver.Config{Log: log, Policy: pol, Tools: tools, OnAppend: onAppend})
	if err != nil {
		t.Fatal(err)
	}

	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			s := logs.String()
			if len(s) > 8000 {
				s = "…" + s[len(s)-8000:]
			}
			t.Logf("worker logs:\n%s", s)
		}
	})
	wctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for i := range 3 {
		conn := testkit.ConnectCluster(t, servers)
		wl, err := events.Open(ctx, ackJS{conn.JS, acks}, ecfg)
		if err != nil {
			t.Fatal(err)
		}
		d, err := driver.New(driver.Config{Log: wl, Policy: pol, Tools: tools, OnAppend: onAppend})
		if err != nil {
			t.Fatal(err)
		}
		w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: fleet.NewQueue(conn.JS, fcfg), Snapshots: fleet.NewSnapshots(conn.JS, fcfg), Agents: map[string]driver.Agent{"cluster": agent}, Concurrency: 20,
			Logger: slog.New(slog.NewTextHandler(logs, nil)).With("worker", i)})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(wctx); err != nil {
				t.Errorf("worker %d: %v", i, err)
			}
		}()
	}

	ids := make([]string, runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("cluster-%02d", i)
		if err := q.Start(ctx, creator, ids[i], "cluster", nil); err != nil {
			t.Fatal(err)
		}
	}
	// Kill the leader while the runs are in flight: once a fifth of the
	// calls ran, and before any run could have finished.
	deadline := time.Now().Add(30 * time.Second)
	for work.total() < runs*workSteps/5 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d calls executed after 30s", work.total())
		}
		time.Sleep(2 * time.Millisecond)
	}
	leader := streamLeader(ctx, t, setup.JS, log.StreamName(0))
	killedAt := time.Now()
	before := work.total()
	for _, s := range servers {
		if s.Name() == leader {
			s.Shutdown()
		}
	}
	t.Logf("shut down %s, leader of %s, after %d of %d calls", leader, log.StreamName(0), before, runs*(workSteps+1))

	waitCompleted(ctx, t, creator, ids, 2*time.Minute)
	t.Logf("every run completed %s after the leader was shut down", time.Since(killedAt).Round(time.Millisecond))
	stop()
	wg.Wait()

	stored := map[string]bool{}
	interrupted := map[string]int{}
	for _, id := range ids {
		recs, _, err := log.Read(ctx, id)
		if err != nil {
			t.Fatalf("read %s: %v", id, err)
		}
		for _, r := range recs {
			stored[r.Event.ID] = true
			if r.Event.Kind == events.StepInterrupted {
				b, err := events.DecodeBody[events.InterruptedBody](r.Event)
				if err != nil {
					t.Fatal(err)
				}
				interrupted[b.Resolution]++
			}
		}
	}
	lost := 0
	for id := range acks.all() {
		if !stored[id] {
			lost++
			if lost <= 5 {
				t.Errorf("event %s was acknowledged but is not in its run", id)
			}
		}
	}
	if lost > 0 {
		t.Errorf("got %d acknowledged events missing from the log, want 0", lost)
	}
	if got := int(appended.Load()); got > len(stored) {
		t.Errorf("got %d appends the driver saw succeed and %d events stored, want no more successes than events", got, len(stored))
	}
	if got, want := work.total()+done.total(), runs*(workSteps+1); got != want {
		t.Errorf("got %d executions, want %d (one per call): %v %v", got, want, work.extra(workSteps), done.extra(workSteps+1))
		for c := range done.extra(workSteps + 1) {
			t.Logf("run %s:%s", c.Run, trace(ctx, log, c.Run))
			break
		}
	}
	for _, id := range ids {
		for n := 1; n <= workSteps+1; n++ {
			tool := work
			if n > workSteps {
				tool = done
			}
			if got := tool.count(id, n); got != 1 {
				t.Errorf("run %s step %d: %s executed %d times, want exactly 1", id, n, tool.spec.Name, got)
			}
		}
	}
	t.Logf("%d events stored, %d publishes acknowledged (all present), %d appends the driver saw succeed, %d failed (conflicts and timeouts); interrupted calls resolved: %v; %d executions for %d calls",
		len(stored), len(acks.all()), appended.Load(), failed.Load(), interrupted, work.total()+done.total(), runs*(workSteps+1))
}

// retry calls fn until it succeeds or wait passes, and returns its last
// error.
func retry(ctx context.Context, wait time.Duration, fn func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// streamLeader returns the name of the server leading stream.
func streamLeader(ctx context.Context, t *testing.T, js jetstream.JetStream, stream string) string {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream %s has no leader: %+v", stream, info.Cluster)
	}
	return info.Cluster.Leader
}

// waitCompleted polls until every run completed, each read bounded by 5 s
// (a read the cluster cannot answer yet must not hold up the wait).
func waitCompleted(ctx context.Context, t *testing.T, d *driver.Driver, ids []string, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	load := func(id string) (projector.View, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := d.Load(ctx, id)
		if err != nil {
			return projector.View{}, err
		}
		return r.View(), nil
	}
	for _, id := range ids {
		for {
			v, err := load(id)
			if err == nil && v.Run.Status == projector.Completed {
				break
			}
			if err == nil && v.Run.Status.Ended() {
				t.Fatalf("run %s ended %s, want COMPLETED%s", id, v.Run.Status, trace(ctx, d.Log(), id))
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s not completed after %s (status %q, err %v)", id, wait, v.Run.Status, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// ackJS records the message id of every run event whose publish the server
// acknowledged: the events that must survive anything.
type ackJS struct {
	jetstream.JetStream
	rec *ackRecorder
}

func (a ackJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := a.JetStream.PublishMsg(ctx, m, opts...)
	if err == nil && strings.HasPrefix(m.Subject, "arb.run.") {
		a.rec.add(m.Header.Get(jetstream.MsgIDHeader))
	}
	return ack, err
}

type ackRecorder struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (r *ackRecorder) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids[id] = true
}

func (r *ackRecorder) all() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]bool, len(r.ids))
	for id := range r.ids {
		out[id] = true
	}
	return out
}

// onceTool is a local side effect that takes 10–50 ms and knows what it
// did: it counts its executions per run and step (driver.CallOf), and its
// reconcile hook answers from that record, so a call whose observation was
// lost is reconciled rather than repeated.
type onceTool struct {
	spec driver.Spec
	mu   sync.Mutex
	done map[driver.Call]int
}

var (
	_ driver.Tool       = (*onceTool)(nil)
	_ driver.Reconciler = (*onceTool)(nil)
)

func newOnceTool(name string, terminal bool) *onceTool {
	return &onceTool{
		spec: driver.Spec{Name: name, Schema: json.RawMessage(testkit.AnyObject), SideEffect: events.LocalMutation, Timeout: 5 * time.Second, Terminal: terminal},
		done: map[driver.Call]int{},
	}
}

func (o *onceTool) Spec() driver.Spec { return o.spec }

func (o *onceTool) Execute(ctx context.Context, _ json.RawMessage) (string, error) {
	call, ok := driver.CallOf(ctx)
	if !ok {
		return "", fmt.Errorf("%s: no call in context", o.spec.Name)
	}
	select {
	case <-time.After(time.Duration(10+rand.IntN(41)) * time.Millisecond):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done[call]++
	return fmt.Sprintf("%s %s/%d", o.spec.Name, call.Run, call.Step), nil
}

func (o *onceTool) Reconcile(ctx context.Context, _ json.RawMessage) (driver.Reconciliation, string, error) {
	call, ok := driver.CallOf(ctx)
	if !ok {
		return driver.Unknown, "", nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done[call] > 0 {
		return driver.Done, fmt.Sprintf("%s %s/%d", o.spec.Name, call.Run, call.Step), nil
	}
	return driver.NotDone, "", nil
}

func (o *onceTool) count(run string, step int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.done[driver.Call{Run: run, Step: step}]
}

// extra returns the executions of steps after step last, by call.
func (o *onceTool) extra(last int) map[driver.Call]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[driver.Call]int{}
	for c, n := range o.done {
		if c.Step > last {
			out[c] = n
		}
	}
	return out
}

func (o *onceTool) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.done {
		n += c
	}
	return n
}
