package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/fsyncs"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// BenchmarkDurability_SyncAlways measures Arbiter with every append fsynced
// (embedded.Config.SyncAlways; docs/adr/0017), on the runs streams spread
// over K shards, in one run per shape:
//
//   - one run of 1,000 steps driven by driver.Drive, and as its reference
//     the same events appended one after another by one bare writer (raw
//     fenced JetStream publishes): one-steps/s, bare1-appends/s and their
//     ratio one/bare1 (goal ≥ 0.45);
//   - 200 runs of 20 steps at once (a 10 ms tool on each step but the last)
//     through one fleet worker with 200 slots, and as its reference 200
//     bare writers appending the same events with no tool, one run each, on
//     the same streams: runs-steps/s, bare200-appends/s and runs/bare200
//     (goal ≥ 0.4);
//   - the fsyncs of the whole process (server included) per step of each,
//     and per bare append, counted by the kernel (internal/fsyncs; goal ≤ 2
//     per step). Without the right to count they are not reported.
//
// Run it with -benchtime=1x (docs/performance.md, "Durability").
//
// Two more shapes measure the other levels of the worker's --durability on
// the same workload: level=process (JetStream's default: fsync every two
// minutes) and level=cluster (three in-process nodes routed on 127.0.0.1,
// the runs streams and the queue with three replicas, default sync). The
// fsyncs of a cluster are those of all three nodes.
func BenchmarkDurability_SyncAlways(b *testing.B) {
	for _, shards := range []int{1, 4} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) { benchDurability(b, shards, levelMachine) })
	}
	b.Run("level=process/shards=1", func(b *testing.B) { benchDurability(b, 1, levelProcess) })
	b.Run("level=cluster/shards=1", func(b *testing.B) { benchDurability(b, 1, levelCluster) })
}

// The durability levels the benchmark measures.
const (
	levelProcess = iota
	levelMachine
	levelCluster
)

func benchDurability(b *testing.B, shards, level int) {
	const oneSteps, runs, runSteps, toolTime = 1000, 200, 20, 10 * time.Millisecond
	ctx := benchCtx(b)
	var js *testkit.JS
	replicas := 1
	switch level {
	case levelCluster:
		js, replicas = testkit.ConnectCluster(b, testkit.Cluster(b, 3)), 3
	default:
		js = testkit.JetStreamWith(b, embedded.Config{SyncAlways: level == levelMachine})
	}
	// As the worker sets it up with --durability machine: nudges in
	// memory, given again from the log after a restart.
	q, snaps, err := fleet.Setup(ctx, js.JS, fleet.Config{Replicas: replicas, WorkInMemory: level == levelMachine})
	if err != nil {
		b.Fatal(err)
	}
	log := js.Log(b, events.Config{Shards: shards, Replicas: replicas})
	counter, err := fsyncs.Start()
	if err != nil {
		b.Logf("fsyncs not counted: %v", err)
	}
	if counter != nil {
		defer counter.Close()
	}
	fsynced := func() uint64 {
		if counter == nil {
			return 0
		}
		n, err := counter.Count()
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	perStep := func(name string, from uint64, steps int) {
		if counter != nil {
			b.ReportMetric(float64(fsynced()-from)/float64(steps), name)
		}
	}

	// The floor: a write of an event's size and its fsync, on the
	// server's file system, one after another.
	b.ReportMetric(rawFsyncRate(b, js.Server.StoreDir(), 500), "raw-fsyncs/s")

	// One run, and one bare writer, interleaved: every 50 steps the tool
	// (which runs with nothing of the run in flight: its allow is stored,
	// its observation not yet sent) has the bare writer append the next
	// 100 events of the same run's template, so load that comes and goes
	// on a shared machine falls on both alike. The agent is asked ahead
	// (driver.Pure), as a scripted agent is.
	var agent *interleaved
	d := benchDriverWith(b, log, func() {
		if agent != nil {
			agent.tick(ctx)
		}
	})
	tmpl := benchTemplate(b, ctx, d, oneSteps)
	var oneTime, bareTime time.Duration
	var oneFsyncs, bareFsyncs uint64
	for range b.N {
		b.StopTimer()
		r, err := d.Create(ctx, "tmpl-"+events.NewID(), "bench", nil)
		if err != nil {
			b.Fatal(err)
		}
		bare := newBareRun(b, ctx, log, js.JS, tmpl)
		b.StartTimer()
		agent = &interleaved{every: 50, chunk: 100, bare: bare, fsynced: fsynced}
		f0, start := fsynced(), time.Now()
		if err := d.Drive(ctx, r, testkit.Counter{Tool: "work", Steps: oneSteps}); err != nil {
			b.Fatal(err)
		}
		agent.rest(ctx)
		oneTime += time.Since(start) - agent.took
		oneFsyncs += fsynced() - f0 - agent.fsyncs
		bareTime += agent.took
		bareFsyncs += agent.fsyncs
		if agent.err != nil {
			b.Fatal(agent.err)
		}
		if st := r.View().Run.Status; st != projector.Completed {
			b.Fatalf("run ended %s %s", st, r.View().Run.Detail)
		}
	}
	if counter != nil {
		b.ReportMetric(float64(oneFsyncs)/float64(b.N*oneSteps), "one-fsyncs/step")
		b.ReportMetric(float64(bareFsyncs)/float64(b.N*len(tmpl)), "bare-fsyncs/append")
	}
	oneRate := float64(b.N*oneSteps) / oneTime.Seconds()
	bare1 := float64(b.N*len(tmpl)) / bareTime.Seconds()
	b.ReportMetric(oneRate, "one-steps/s")
	b.ReportMetric(bare1, "bare1-appends/s")
	b.ReportMetric(oneRate/bare1, "one/bare1")
	b.ReportMetric(float64(len(tmpl))/oneSteps, "one-appends/step")

	// 200 runs through a fleet worker, and 200 bare writers.
	var finished atomic.Int64
	all := make(chan struct{})
	d10 := benchDriver(b, log, toolTime, func(k events.Kind, _ any, _ time.Duration, err error) {
		if err == nil && k == events.RunFinished && finished.Add(1) == runs {
			close(all)
		}
	})
	tmpl20 := benchTemplate(b, ctx, d10, runSteps)
	finished.Store(0)
	f := &benchFleet{js: js, log: log, q: q, s: snaps}
	f.createRuns(b, ctx, d10, "durable", runs)
	f0, start := fsynced(), time.Now()
	stop := f.runWorkers(b, d10, testkit.Counter{Tool: "work", Steps: runSteps}, 1, runs)
	select {
	case <-all:
	case <-ctx.Done():
		b.Fatalf("%d of %d runs finished", finished.Load(), runs)
	}
	runsTime := time.Since(start)
	perStep("runs-fsyncs/step", f0, runs*runSteps)
	stop()
	f0 = fsynced()
	took := bareConcurrent(b, ctx, log, js.JS, tmpl20, runs, 0)
	perStep("bare200-fsyncs/append", f0, runs*len(tmpl20))
	runsRate := float64(runs*runSteps) / runsTime.Seconds()
	bare200 := float64(runs*len(tmpl20)) / took.Seconds()
	b.ReportMetric(runsRate, "runs-steps/s")
	b.ReportMetric(bare200, "bare200-appends/s")
	b.ReportMetric(runsRate/bare200, "runs/bare200")
}

// rawFsyncRate appends 600 bytes to a file in dir and fsyncs it, n times,
// and returns how many it made a second.
func rawFsyncRate(b *testing.B, dir string, n int) float64 {
	b.Helper()
	f, err := os.CreateTemp(dir, "fsync-*")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 600)
	start := time.Now()
	for range n {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// interleaved has bare append its next chunk events every every calls of
// tick, timing them (took) and counting their fsyncs.
type interleaved struct {
	every, chunk int
	bare         *bareRun
	fsynced      func() uint64
	calls        int
	next         int // the bare run's next event
	took         time.Duration
	fsyncs       uint64
	err          error
}

func (a *interleaved) tick(ctx context.Context) {
	if a.calls++; a.calls%a.every == 0 {
		a.appendBare(ctx, a.chunk)
	}
}

// rest appends what is left of the bare run.
func (a *interleaved) rest(ctx context.Context) { a.appendBare(ctx, len(a.bare.evs)) }

func (a *interleaved) appendBare(ctx context.Context, n int) {
	to := min(a.next+n, len(a.bare.evs))
	if a.err != nil || to == a.next {
		return
	}
	f0, start := a.fsynced(), time.Now()
	a.err = a.bare.appendRange(ctx, a.next, to, nil)
	a.took += time.Since(start)
	a.fsyncs += a.fsynced() - f0
	a.next = to
}

// benchDriverWith is benchDriver with no tool time, whose work tool calls
// during before it returns.
func benchDriverWith(b *testing.B, log *events.Log, during func()) *driver.Driver {
	b.Helper()
	work := testkit.NewLedger("work", events.ReadOnly, testkit.AnyObject)
	work.Result = func(context.Context, json.RawMessage) (string, error) {
		during()
		return "ok", nil
	}
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	d, err := driver.New(driver.Config{
		Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "bench"),
		Tools:  []driver.Tool{work, done},
		Limits: events.Limits{MaxSteps: 100000, MaxRepeats: 100000},
	})
	if err != nil {
		b.Fatal(err)
	}
	return d
}
