package faulttest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
)

// scenario is one way of crashing workers: each entry of crashes starts a
// worker with ARBITER_CRASH_BEFORE set to it and waits for it to SIGKILL
// itself; a healthy worker then takes over every run.
type scenario struct {
	name    string
	crashes []string
	runs    int
	agent   string
	// concurrency of the crashing workers. With 1 a worker drives one run
	// to its end before it takes the next, so "<kind>:<n>" is the n-th step
	// of the first run it takes: step 1 write_file (local_mutation), 2
	// read_file (read_only), 3 send_email (remote_mutation), 4 finish
	// (read_only, terminal).
	concurrency int
	// randomKill: the test SIGKILLs the worker itself once the ledger holds
	// a random number of executions, wherever the worker then is.
	randomKill bool
	// points are where each crash must leave the one run it touched: the
	// kind and step of its last event ("" kind: no run was touched yet).
	// Empty for randomKill.
	points []point
}

type point struct {
	kind events.Kind
	step int
}

// single is a scenario of one crash of a worker of concurrency 1 before the
// n-th append of kind.
func single(kind events.Kind, n int) scenario {
	spec := fmt.Sprintf("%s:%d", kind, n)
	var p point
	switch kind {
	case events.StepDecided:
		if n > 1 {
			p = point{events.StepObserved, n - 1}
		}
	case events.StepObserved:
		// The decision carries its allow (ADR 0017).
		p = point{events.StepDecided, n}
	case events.RunFinished:
		// The terminal tool's result travels in the run's end (ADR
		// 0017): the crash leaves step 4 allowed and unobserved.
		p = point{events.StepDecided, 4}
	}
	return scenario{name: spec, crashes: []string{spec}, runs: 3, agent: "steps", concurrency: 1, points: []point{p}}
}

func crashScenarios() []scenario {
	var out []scenario
	// A step is two appends: the decision with its policy result, then the
	// observation (ADR 0017); no step.policy is written on this path. The
	// last step's observation is the run's end (run.finished:1 below).
	for n := 1; n <= 4; n++ {
		out = append(out, single(events.StepDecided, n))
		if n < 4 {
			out = append(out, single(events.StepObserved, n))
		}
	}
	out = append(out,
		single(events.RunFinished, 1),
		// Crashes during recovery: the write is interrupted, and the worker
		// that finds it dies before raising the approval; the read is
		// interrupted, and the worker that finds it dies before recording the
		// rerun, or after it, before observing the rerun.
		scenario{name: "step.observed:1,approval.requested:1", crashes: []string{"step.observed:1", "approval.requested:1"}, runs: 1, agent: "steps", concurrency: 1,
			points: []point{{events.StepDecided, 1}, {events.StepDecided, 1}}},
		scenario{name: "step.observed:2,step.interrupted:1", crashes: []string{"step.observed:2", "step.interrupted:1"}, runs: 1, agent: "steps", concurrency: 1,
			points: []point{{events.StepDecided, 2}, {events.StepDecided, 2}}},
		scenario{name: "step.observed:2,step.observed:1", crashes: []string{"step.observed:2", "step.observed:1"}, runs: 1, agent: "steps", concurrency: 1,
			points: []point{{events.StepDecided, 2}, {events.StepInterrupted, 2}}},
		// Many runs in flight, killed wherever they are.
		scenario{name: "random", crashes: []string{""}, runs: 6, agent: "slow", concurrency: 16, randomKill: true},
	)
	return out
}

// checkPoint checks that the crash left exactly the run it touched where p
// says, and every other run untouched.
func checkPoint(ctx context.Context, l *events.Log, runs []string, p point) error {
	var touched []string
	var last events.Event
	for _, id := range runs {
		recs, _, err := l.Read(ctx, id)
		if err != nil {
			return err
		}
		if len(recs) > 1 {
			touched = append(touched, id)
			last = recs[len(recs)-1].Event
		}
	}
	if p.kind == "" {
		if len(touched) != 0 {
			return fmt.Errorf("crash point: runs %v have events, want none touched", touched)
		}
		return nil
	}
	if len(touched) != 1 {
		return fmt.Errorf("crash point: runs %v have events, want exactly one touched", touched)
	}
	var b struct {
		Step int `json:"step"`
	}
	if err := json.Unmarshal(last.Body, &b); err != nil {
		return err
	}
	if last.Kind != p.kind || b.Step != p.step {
		return fmt.Errorf("crash point: run %s ends with %s of step %d, want %s of step %d", touched[0], last.Kind, b.Step, p.kind, p.step)
	}
	return nil
}

// TestWorker_CrashAtEveryAppendPoint runs every scenario -crash.rounds
// times (default 20), each round with its own JetStream server, sandbox and
// worker processes, and audits every round's runs and ledger (auditRuns):
// every run ends, nothing executes without a durable allow, no side effect
// executes twice, and every unresolvable interrupted call ends as exactly
// one interrupted_side_effect approval.
func TestWorker_CrashAtEveryAppendPoint(t *testing.T) {
	t.Run("sync=default", func(t *testing.T) { crashAtEveryAppendPoint(t, false, rounds()) })
	// With every append fsynced (ADR 0017) the same promises hold; fewer
	// rounds, since each append costs a disk flush.
	t.Run("sync=always", func(t *testing.T) { crashAtEveryAppendPoint(t, true, max(rounds()/4, 3)) })
}

func crashAtEveryAppendPoint(t *testing.T, syncAlways bool, n int) {
	bin := workerBinary(t)
	var total audit
	totalCrashes, totalRounds := 0, 0
	start := time.Now()
	for _, sc := range crashScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			base := t.TempDir()
			results := make([]roundResult, n)
			sem := make(chan struct{}, max(*crashParallel, 1))
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					results[i] = crashRound(ctx, bin, filepath.Join(base, fmt.Sprint(i)), sc, i, syncAlways)
				}()
			}
			wg.Wait()
			var sum audit
			crashes, failed := 0, 0
			for i, r := range results {
				sum.add(r.audit)
				crashes += r.crashes
				if r.err != nil {
					failed++
					if failed <= 3 {
						t.Errorf("round %d: %v", i, r.err)
					}
				}
			}
			if failed > 3 {
				t.Errorf("%d more rounds failed", failed-3)
			}
			t.Logf("%d rounds, %d crashes: %s", n, crashes, sum)
			total.add(sum)
			totalCrashes += crashes
			totalRounds += n
		})
	}
	t.Logf("all scenarios: %d rounds, %d SIGKILLs in %s: %s", totalRounds, totalCrashes, time.Since(start).Round(time.Second), total)
}

type roundResult struct {
	audit   audit
	crashes int
	err     error
}

// crashRound runs one round of sc in dir: a server, sc.runs runs, the
// crashing workers one after the other, then a healthy worker until every
// run is settled, stopped with SIGTERM; then the audit.
func crashRound(ctx context.Context, bin, dir string, sc scenario, round int, syncAlways bool) (res roundResult) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return roundResult{err: err}
	}
	defer os.RemoveAll(dir)
	env, err := newProcEnvSync(ctx, dir, events.ReadOnly, syncAlways)
	if err != nil {
		return roundResult{err: err}
	}
	defer env.close()
	runs := make([]string, sc.runs)
	for i := range runs {
		runs[i] = fmt.Sprintf("run-%d-%d", round, i)
		if err := env.q.Start(ctx, env.d, runs[i], sc.agent, nil); err != nil {
			return roundResult{err: err}
		}
	}
	fail := func(p *proc, format string, args ...any) roundResult {
		var b strings.Builder
		fmt.Fprintf(&b, format, args...)
		if p != nil {
			fmt.Fprintf(&b, "\nworker stderr:\n%s", p.tail(3000))
		}
		for _, id := range runs {
			fmt.Fprintf(&b, "\nrun %s:%s", id, trace(ctx, env.log, id))
		}
		res.err = errors.New(b.String())
		return res
	}
	for _, spec := range sc.crashes {
		p, err := env.startWorker(bin, workerOpts{crashBefore: spec, concurrency: sc.concurrency})
		if err != nil {
			return roundResult{err: err}
		}
		if sc.randomKill {
			if err := killAfterExecutions(p, env.sandbox, 1+rand.IntN(sc.runs*4)); err != nil {
				p.stop()
				return fail(p, "random kill: %v", err)
			}
		}
		err = p.wait(30 * time.Second)
		p.stop()
		if !killedBy(err, syscall.SIGKILL) {
			return fail(p, "worker with ARBITER_CRASH_BEFORE=%q: got exit %v, want death by SIGKILL", spec, err)
		}
		if len(sc.points) > 0 {
			if err := checkPoint(ctx, env.log, runs, sc.points[res.crashes]); err != nil {
				return fail(p, "worker with ARBITER_CRASH_BEFORE=%q: %v", spec, err)
			}
		}
		res.crashes++
	}
	p, err := env.startWorker(bin, workerOpts{})
	if err != nil {
		return roundResult{err: err}
	}
	defer p.stop()
	if err := waitSettled(ctx, env.d, runs, 60*time.Second); err != nil {
		return fail(p, "healthy worker: %v", err)
	}
	// The runs may have settled before this worker did anything: wait
	// until it says it runs (its signal handler is installed by then), or
	// a SIGTERM during its start kills it by the default action.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.stderr.String(), "worker running"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fail(p, "healthy worker never said it runs")
		}
	}
	if err := p.signal(syscall.SIGTERM); err != nil {
		return fail(p, "SIGTERM: %v", err)
	}
	if err := p.wait(30 * time.Second); err != nil {
		return fail(p, "healthy worker after SIGTERM: got %v, want a clean exit", err)
	}
	a, err := auditRuns(ctx, env.log, env.sandbox, runs)
	res.audit = a
	if err != nil {
		return fail(nil, "audit: %v", err)
	}
	return res
}

// killAfterExecutions SIGKILLs p once the sandbox's ledger holds n
// executions (or at once if p has already exited).
func killAfterExecutions(p *proc, sandbox string, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("worker exited before it was killed: %v", p.err)
		default:
		}
		if l, err := readLedger(sandbox); err == nil && len(l) >= n {
			return p.signal(syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return fmt.Errorf("ledger did not reach %d executions in 30s", n)
}
