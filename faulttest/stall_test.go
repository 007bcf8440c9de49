package faulttest

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// TestWorker_StalledWorkerIsFencedOut stops a worker with SIGSTOP while its
// tool runs (the "stall" agent: a 2.5 s sleep, a write, the end), lets a
// second worker take the run over after AckWait (1 s) and settle it, stops
// that one, and wakes the first with SIGCONT. The woken worker's tool
// returns; its next append must be refused and it must stop there:
//
//   - its metrics count one conflict and no successful append after it woke
//     (appends attempted minus failed is what it was before SIGSTOP);
//   - the run's tail is exactly where the second worker left it;
//   - the ledger holds exactly the executions before the wake: the stalled
//     worker never ran the write of the next step.
//
// The sleep is a side effect in one case (the taker raises an
// interrupted_side_effect approval) and read-only in the other (the taker
// runs it again and completes the run).
func TestWorker_StalledWorkerIsFencedOut(t *testing.T) {
	bin := workerBinary(t)
	for _, tc := range []struct {
		name       string
		sleepClass events.SideEffect
		want       projector.Status
		wantLedger map[string]int // "<step> <tool>" → executions
	}{
		{"side effect paused", events.LocalMutation, projector.Waiting, map[string]int{"1 sleep": 1}},
		{"read-only rerun completed", events.ReadOnly, projector.Completed, map[string]int{"1 sleep": 2, "2 write_file": 1, "3 finish": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			env, err := newProcEnv(ctx, t.TempDir(), tc.sleepClass)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(env.close)
			const run = "stalled"
			if err := env.q.Start(ctx, env.d, run, "stall", nil); err != nil {
				t.Fatal(err)
			}

			stalled := mustStart(t, env, bin, workerOpts{concurrency: 1, metrics: true})
			waitLedger(t, env.sandbox, func(l []ledgerEntry) bool { return len(l) == 1 })
			before := appendCounts(ctx, t, stalled)
			if before.ok != 1 || before.conflicts != 0 {
				t.Fatalf("stalled worker before SIGSTOP: got %d appends made and %d conflicts, want 1 (the decision with its allow) and 0", before.ok, before.conflicts)
			}
			if err := stalled.signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}

			// The queue hands the run over once AckWait has passed since the
			// stalled worker's last sign of life (which may be just before
			// the SIGSTOP): no bound on the time is asserted here.
			taker := mustStart(t, env, bin, workerOpts{})
			v := waitStatus(ctx, t, env.d, run, tc.want)
			if tc.want == projector.Waiting {
				if a := v.PendingApproval(); a == nil || a.Kind != driver.InterruptedSideEffect || a.Step != 1 {
					t.Fatalf("taken-over run waits on %+v, want an %s approval for step 1", a, driver.InterruptedSideEffect)
				}
			}
			if err := taker.signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := taker.wait(30 * time.Second); err != nil {
				t.Fatalf("taker after SIGTERM: got %v, want a clean exit", err)
			}
			tail, err := env.log.Tail(ctx, run)
			if err != nil {
				t.Fatal(err)
			}
			ledger, err := readLedger(env.sandbox)
			if err != nil {
				t.Fatal(err)
			}

			if err := stalled.signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			after := waitConflict(ctx, t, stalled, func() bool {
				l, _ := readLedger(env.sandbox)
				now, _ := env.log.Tail(ctx, run)
				return len(l) != len(ledger) || now != tail
			})
			// Let the woken worker go on as far as it would, then stop it.
			if err := stalled.signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := stalled.wait(30 * time.Second); err != nil {
				t.Fatalf("woken worker after SIGTERM: got %v, want a clean exit", err)
			}

			if after.ok != before.ok {
				t.Errorf("woken worker: got %d appends made, want %d (none after it woke)", after.ok, before.ok)
			}
			if after.conflicts != 1 {
				t.Errorf("woken worker: got %d conflicts, want 1 (its first append after waking, then it stops)", after.conflicts)
			}
			if got, err := env.log.Tail(ctx, run); err != nil || got != tail {
				t.Errorf("run tail after the woken worker: got %+v (err %v), want %+v, unchanged%s", got, err, tail, trace(ctx, env.log, run))
			}
			final, err := readLedger(env.sandbox)
			if err != nil {
				t.Fatal(err)
			}
			if len(final) != len(ledger) {
				t.Errorf("ledger after the woken worker: got %d executions, want %d: %v", len(final), len(ledger), final)
			}
			got := map[string]int{}
			for _, e := range final {
				got[fmt.Sprintf("%d %s", e.Step, e.Tool)]++
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.wantLedger) {
				t.Errorf("ledger: got %v, want %v", got, tc.wantLedger)
			}
			if _, err := auditRuns(ctx, env.log, env.sandbox, []string{run}); err != nil {
				t.Errorf("audit: %v", err)
			}
		})
	}
}

func mustStart(t *testing.T, env *procEnv, bin string, o workerOpts) *proc {
	t.Helper()
	p, err := env.startWorker(bin, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	return p
}

func waitLedger(t *testing.T, sandbox string, ok func([]ledgerEntry) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := readLedger(sandbox)
		if err != nil {
			t.Fatal(err)
		}
		if ok(l) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ledger after 20s: %v", l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitStatus(ctx context.Context, t *testing.T, d *driver.Driver, run string, want projector.Status) projector.View {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := d.Load(ctx, run)
		if err == nil && r.View().Run.Status == want {
			return r.View()
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s after 30s: want status %s (err %v)%s", run, want, err, trace(ctx, d.Log(), run))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counts are a worker's append metrics.
type counts struct {
	ok, conflicts int // appends that succeeded; runs dropped on a conflict
}

func appendCounts(ctx context.Context, t *testing.T, p *proc) counts {
	t.Helper()
	var m map[string]float64
	var err error
	for range 200 { // the metrics address is logged just after start
		if m, err = p.metrics(ctx); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("worker metrics: %v\n%s", err, p.tail(2000))
	}
	return counts{
		ok:        int(m["arbiter_append_seconds_count"] - m["arbiter_append_errors_total"]),
		conflicts: int(m["arbiter_conflicts_total"]),
	}
}

// waitConflict polls p's metrics until it has dropped a run on a conflict,
// or moved gives up waiting (the run or the ledger changed: the checks that
// follow say how), gives it a moment more and returns its counts. No
// conflict within 20 s is an error of its own.
func waitConflict(ctx context.Context, t *testing.T, p *proc, moved func() bool) counts {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c := appendCounts(ctx, t, p)
		if c.conflicts > 0 || moved() {
			// Whatever the worker does after the conflict it does at once
			// (the driver returns, the worker hands the nudge back); a wrong
			// next step would show in what is read after this.
			time.Sleep(300 * time.Millisecond)
			return appendCounts(ctx, t, p)
		}
		if time.Now().After(deadline) {
			t.Errorf("woken worker saw no conflict in 20s:\n%s", p.tail(3000))
			return c
		}
		time.Sleep(20 * time.Millisecond)
	}
}
