package approvals_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

// watchEnv is a log with a driver whose runs pause on a remote_mutation
// approval, and the operator key it trusts.
type watchEnv struct {
	log *events.Log
	d   *driver.Driver
	kp  nkeys.KeyPair
	dir string // where durable watchers keep their state files
}

func newWatchEnv(t *testing.T, cfg events.Config) *watchEnv {
	t.Helper()
	js := testkit.JetStream(t)
	log := js.Log(t, cfg)
	kp, pub := newOperator(t)
	d, err := driver.New(driver.Config{
		Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"),
		Tools:     []driver.Tool{testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject)},
		Operators: approvals.Operators{pub: "alice"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return &watchEnv{log: log, d: d, kp: kp, dir: t.TempDir()}
}

// runIDs returns n run ids, covering every shard of the log when n allows.
func (e *watchEnv) runIDs(n int) []string {
	shards := e.log.Config().Shards
	var ids []string
	used := map[int]int{}
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("run-%d", i)
		k := e.log.Shard(id)
		if len(ids) < shards && used[k] > 0 {
			continue
		}
		used[k]++
		ids = append(ids, id)
	}
	return ids
}

// pause creates run and drives it until it waits on its approval.
func (e *watchEnv) pause(t *testing.T, run string) projector.Approval {
	t.Helper()
	r, err := e.d.Create(t.Context(), run, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.Drive(t.Context(), r, testkit.NewScript(testkit.Call("send", `{"to":"ops"}`))); err != nil {
		t.Fatal(err)
	}
	v := r.View()
	a := v.PendingApproval()
	if a == nil {
		t.Fatalf("run %s: status %s, want it waiting", run, v.Run.Status)
	}
	return *a
}

// decide records an operator's decision on run's approval a.
func (e *watchEnv) decide(t *testing.T, run string, a projector.Approval, decision string) {
	t.Helper()
	d, err := approvals.Sign(e.kp, run, a.ID, a.Hash, decision, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	k := events.ApprovalGranted
	if decision == events.DecisionDeny {
		k = events.ApprovalDenied
	}
	ev, err := events.New(run, k, d)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := e.log.Tail(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.log.Append(t.Context(), tail, ev); err != nil {
		t.Fatal(err)
	}
}

// watcher runs approvals.Watch in the background and keeps what it hands.
type watcher struct {
	mu      sync.Mutex
	notices []approvals.Notice
	stop    context.CancelFunc
	done    chan error
}

// state is the state file of the durable watcher named durable ("" for a
// watcher that keeps none).
func (e *watchEnv) state(durable string) string {
	if durable == "" {
		return ""
	}
	return filepath.Join(e.dir, durable+".json")
}

// watch starts a watcher; fn, when set, is called after a notice is kept
// and its error returned to Watch.
func (e *watchEnv) watch(t *testing.T, durable string, fn func(context.CancelFunc, approvals.Notice) error) *watcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{stop: cancel, done: make(chan error, 1)}
	state := e.state(durable)
	go func() {
		w.done <- approvals.Watch(ctx, e.log, state, func(n approvals.Notice) error {
			w.mu.Lock()
			w.notices = append(w.notices, n)
			w.mu.Unlock()
			if fn != nil {
				return fn(cancel, n)
			}
			return nil
		})
	}()
	t.Cleanup(func() { w.close(t) })
	return w
}

// close stops the watcher and returns Watch's error.
func (w *watcher) close(t *testing.T) error {
	t.Helper()
	w.stop()
	select {
	case err, ok := <-w.done:
		if ok {
			close(w.done)
			return err
		}
		return nil
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return within 5s of its context ending")
		return nil
	}
}

func (w *watcher) got() []approvals.Notice {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]approvals.Notice(nil), w.notices...)
}

// waitFor waits until the watcher has handed n notices.
func (w *watcher) waitFor(t *testing.T, n int) []approvals.Notice {
	t.Helper()
	return w.waitForWithin(t, n, 10*time.Second)
}

func (w *watcher) waitForWithin(t *testing.T, n int, within time.Duration) []approvals.Notice {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := w.got()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("watcher got %d notices after %s, want %d: %s", len(got), within, n, describe(got))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// quiet checks that the watcher hands nothing beyond n for a while.
func (w *watcher) quiet(t *testing.T, n int) {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	if got := w.got(); len(got) != n {
		t.Errorf("watcher got %d notices, want %d: %s", len(got), n, describe(got))
	}
}

func describe(ns []approvals.Notice) string {
	var b strings.Builder
	for _, n := range ns {
		fmt.Fprintf(&b, "[%s %s %s#%d] ", n.Event.Run, n.Event.Kind, n.Stream, n.StreamSeq)
	}
	return b.String()
}

// key identifies an event for set comparisons.
func key(run string, k events.Kind) string { return run + " " + string(k) }

// wantNotices checks that got holds exactly the events in want, each once,
// and that each notice says where its event is stored.
func (e *watchEnv) wantNotices(t *testing.T, got []approvals.Notice, want ...string) {
	t.Helper()
	seen := map[string]int{}
	for _, n := range got {
		seen[key(n.Event.Run, n.Event.Kind)]++
		if wantSubj := e.log.Subject(n.Event.Run, n.Event.Kind); n.Subject != wantSubj {
			t.Errorf("notice of %s %s: subject %s, want %s", n.Event.Run, n.Event.Kind, n.Subject, wantSubj)
		}
		if wantStream := e.log.StreamName(e.log.Shard(n.Event.Run)); n.Stream != wantStream {
			t.Errorf("notice of %s %s: stream %s, want %s", n.Event.Run, n.Event.Kind, n.Stream, wantStream)
		}
		if n.StreamSeq == 0 {
			t.Errorf("notice of %s %s: no stream sequence", n.Event.Run, n.Event.Kind)
		}
		if !strings.HasPrefix(string(n.Event.Kind), "approval.") {
			t.Errorf("watcher handed a %s event, want approval events only", n.Event.Kind)
		}
	}
	for _, w := range want {
		if seen[w] != 1 {
			t.Errorf("%s delivered %d times, want once (got %s)", w, seen[w], describe(got))
		}
		delete(seen, w)
	}
	for k, c := range seen {
		t.Errorf("unexpected %s delivered %d times", k, c)
	}
}

// settled checks that the durable watcher's state file holds, for every
// shard, the stream sequence of the last notice it was handed there (the
// watcher must be closed: Watch writes the file before it returns).
func (e *watchEnv) settled(t *testing.T, durable string, got []approvals.Notice) {
	t.Helper()
	want := make([]uint64, e.log.Config().Shards)
	for _, n := range got {
		k := e.log.Shard(n.Event.Run)
		want[k] = max(want[k], n.StreamSeq)
	}
	b, err := os.ReadFile(e.state(durable))
	if err != nil {
		t.Fatalf("state file of %s: %v", durable, err)
	}
	var st struct{ Seqs []uint64 }
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("state file of %s: %v", durable, err)
	}
	if !slices.Equal(st.Seqs, want) {
		t.Errorf("state file of %s holds %v, want %v (%s)", durable, st.Seqs, want, b)
	}
}

// noConsumers checks that watching left no consumer on any runs stream.
func (e *watchEnv) noConsumers(t *testing.T) {
	t.Helper()
	for k := 0; k < e.log.Config().Shards; k++ {
		s, err := e.log.JetStream().Stream(t.Context(), e.log.StreamName(k))
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Consumers != 0 {
			t.Errorf("%s has %d consumers after watching, want 0", e.log.StreamName(k), info.State.Consumers)
		}
	}
}

var shardCases = []struct {
	name string
	cfg  events.Config
}{
	{"one shard", events.Config{}},
	{"three shards", events.Config{Shards: 3}},
}

func TestWatch_DeliversRequestToLateSubscriber(t *testing.T) {
	for _, sc := range shardCases {
		t.Run(sc.name, func(t *testing.T) {
			e := newWatchEnv(t, sc.cfg)
			runs := e.runIDs(4)
			var want []string
			for _, run := range runs {
				e.pause(t, run)
				want = append(want, key(run, events.ApprovalRequested))
			}
			// Every approval was requested before the watcher existed.
			w := e.watch(t, "late", nil)
			e.wantNotices(t, w.waitFor(t, len(want)), want...)
			w.quiet(t, len(want))
		})
	}
}

func TestWatch_DecidedDeliveredOnce(t *testing.T) {
	for _, sc := range shardCases {
		t.Run(sc.name, func(t *testing.T) {
			e := newWatchEnv(t, sc.cfg)
			runs := e.runIDs(4)
			as := map[string]projector.Approval{}
			var want []string
			for _, run := range runs {
				as[run] = e.pause(t, run)
				want = append(want, key(run, events.ApprovalRequested))
			}
			e.decide(t, runs[0], as[runs[0]], events.DecisionGrant)
			e.decide(t, runs[1], as[runs[1]], events.DecisionDeny)
			want = append(want, key(runs[0], events.ApprovalGranted), key(runs[1], events.ApprovalDenied))

			w := e.watch(t, "ops", nil)
			got := w.waitFor(t, len(want))
			e.wantNotices(t, got, want...)
			if err := w.close(t); err != nil {
				t.Fatalf("Watch = %v, want nil after its context ended", err)
			}
			e.settled(t, "ops", got)
			e.noConsumers(t)

			// Restarted, the watcher hands nothing it already handled, and
			// then only what is new.
			again := e.watch(t, "ops", nil)
			again.quiet(t, 0)
			e.decide(t, runs[2], as[runs[2]], events.DecisionGrant)
			e.wantNotices(t, again.waitFor(t, 1), key(runs[2], events.ApprovalGranted))
			again.quiet(t, 1)
		})
	}
}

func TestWatch_NonDurableReadsFromStart(t *testing.T) {
	for _, sc := range shardCases {
		t.Run(sc.name, func(t *testing.T) {
			e := newWatchEnv(t, sc.cfg)
			runs := e.runIDs(3)
			var want []string
			for _, run := range runs {
				a := e.pause(t, run)
				want = append(want, key(run, events.ApprovalRequested))
				if run == runs[0] {
					e.decide(t, run, a, events.DecisionGrant)
					want = append(want, key(run, events.ApprovalGranted))
				}
			}
			first := e.watch(t, "", nil)
			e.wantNotices(t, first.waitFor(t, len(want)), want...)
			if err := first.close(t); err != nil {
				t.Fatalf("Watch = %v, want nil", err)
			}
			// With no durable name nothing is remembered: a second watcher
			// reads everything from the start again, then keeps following.
			second := e.watch(t, "", nil)
			e.wantNotices(t, second.waitFor(t, len(want)), want...)
			e.pause(t, "run-late")
			got := second.waitFor(t, len(want)+1)
			e.wantNotices(t, got, append(want, key("run-late", events.ApprovalRequested))...)
		})
	}
}

// TestWatch_CallbackErrorStopsAndRedelivers: an error from fn ends Watch
// with that error, and a durable watcher started again gets the event it
// failed on at once.
func TestWatch_CallbackErrorStopsAndRedelivers(t *testing.T) {
	e := newWatchEnv(t, events.Config{})
	e.pause(t, "run-a")
	errBusy := errors.New("webhook down")
	w := e.watch(t, "hook", func(context.CancelFunc, approvals.Notice) error { return errBusy })
	w.waitFor(t, 1)
	select {
	case err := <-w.done:
		if !errors.Is(err, errBusy) {
			t.Errorf("Watch = %v, want %v", err, errBusy)
		}
		w.done <- nil
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after fn failed")
	}
	again := e.watch(t, "hook", nil)
	deadline := time.Now().Add(3 * time.Second)
	for len(again.got()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a durable watcher restarted after fn failed was not handed the failed event again within 3s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.wantNotices(t, again.got(), key("run-a", events.ApprovalRequested))
}

// TestWatch_HandledBeforeStopIsAcknowledged: a watcher that stops from
// inside fn ("wait for this approval, then stop") has handled that event;
// the durable subscription must count it acknowledged, or a restarted
// watcher is handed it again.
func TestWatch_HandledBeforeStopIsAcknowledged(t *testing.T) {
	e := newWatchEnv(t, events.Config{})
	e.pause(t, "run-a")
	w := e.watch(t, "once", func(stop context.CancelFunc, n approvals.Notice) error {
		stop()
		return nil
	})
	w.waitFor(t, 1)
	if err := w.close(t); err != nil {
		t.Fatalf("Watch = %v, want nil", err)
	}
	e.settled(t, "once", w.got())
	again := e.watch(t, "once", nil)
	again.quiet(t, 0)
}

// TestWatch_BadStateFileRefused: a state file Watch cannot trust is an
// error naming the file, and Watch hands nothing.
func TestWatch_BadStateFileRefused(t *testing.T) {
	e := newWatchEnv(t, events.Config{Shards: 2})
	e.pause(t, "run-a")
	tests := []struct{ name, content string }{
		{"not json", "seq 12\n"},
		{"other stream", `{"stream":"OTHER","shards":2,"seqs":[0,0]}`},
		{"other shard count", `{"stream":"ARB_RUNS","shards":1,"seqs":[0]}`},
		{"positions missing", `{"stream":"ARB_RUNS","shards":2,"seqs":[5]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "w.json")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			handed := 0
			err := approvals.Watch(t.Context(), e.log, path, func(approvals.Notice) error { handed++; return nil })
			if !errors.Is(err, approvals.ErrState) || !strings.Contains(err.Error(), path) {
				t.Errorf("Watch with a state file holding %q = %v, want %v naming %s", tt.content, err, approvals.ErrState, path)
			}
			if handed != 0 {
				t.Errorf("Watch handed %d notices with a bad state file, want 0", handed)
			}
		})
	}
	t.Run("cannot be written", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "no-such-dir", "w.json")
		err := approvals.Watch(t.Context(), e.log, path, func(approvals.Notice) error { return nil })
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) {
			t.Errorf("Watch with a state file in a missing directory = %v, want %v naming %s", err, os.ErrNotExist, path)
		}
	})
}
