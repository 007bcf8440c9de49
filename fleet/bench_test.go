package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
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

// The benchmarks behind docs/performance.md ("Worker fleet"). Each reports
// its figures with b.ReportMetric; run them with -benchtime=1x (see the doc
// for the exact command).

func benchCtx(b *testing.B) context.Context {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

// benchDriver returns a driver over log with a read-only "work" tool whose
// execution takes toolTime (none when zero) and a terminal "done" tool.
func benchDriver(b *testing.B, log *events.Log, toolTime time.Duration, onAppend func(events.Kind, any, time.Duration, error)) *driver.Driver {
	b.Helper()
	work := testkit.NewLedger("work", events.ReadOnly, testkit.AnyObject)
	work.Result = func(ctx context.Context, _ json.RawMessage) (string, error) {
		if toolTime > 0 {
			select {
			case <-time.After(toolTime):
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "ok", nil
	}
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	d, err := driver.New(driver.Config{
		Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "bench"),
		Tools:    []driver.Tool{work, done},
		Limits:   events.Limits{MaxSteps: 100000, MaxRepeats: 100000},
		OnAppend: onAppend,
	})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// benchTemplate drives one run of steps steps and returns its events after
// run.created: the events a bare appender re-appends, same kinds and sizes.
func benchTemplate(b *testing.B, ctx context.Context, d *driver.Driver, steps int) []events.Event {
	b.Helper()
	id := "tmpl-" + events.NewID()
	r, err := d.Create(ctx, id, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Drive(ctx, r, testkit.Counter{Tool: "work", Steps: steps}); err != nil {
		b.Fatal(err)
	}
	recs, _, err := d.Log().Read(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]events.Event, 0, len(recs)-1)
	for _, rec := range recs[1:] {
		out = append(out, rec.Event)
	}
	return out
}

// bareRun appends tmpl's events to a new run, one fenced append after
// another: what driving the run costs in appends alone. Two ways:
//
//   - raw (js set): the bare fenced append, a JetStream publish of the
//     event's bytes, encoded and chained beforehand, with the run's fence
//     and the event id, through the JetStream client (the floor the
//     foundation's BenchmarkAppendRatio measures Log.Append against);
//   - through events.Log.Append, which also encodes, hashes and checks
//     every event: Arbiter's own append.
type bareRun struct {
	log  *events.Log
	js   jetstream.JetStream
	id   string
	tail events.Tail
	evs  []events.Event
	msgs []*nats.Msg // raw: subject and bytes of each event
	// allow marks the write-ahead allows, found before anything is timed.
	allow []bool
}

func newBareRun(b *testing.B, ctx context.Context, log *events.Log, js jetstream.JetStream, tmpl []events.Event) *bareRun {
	b.Helper()
	// A run id as long as a driven one ("tmpl-" + ULID), so bodies and
	// envelopes are the same size.
	id := "bare-" + events.NewID()
	ev, err := events.New(id, events.RunCreated, events.RunCreatedBody{Agent: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	tail, err := log.Append(ctx, events.Tail{}, ev)
	if err != nil {
		b.Fatal(err)
	}
	r := &bareRun{log: log, js: js, id: id, tail: tail, evs: make([]events.Event, len(tmpl)), allow: make([]bool, len(tmpl))}
	chain := tail
	for i, e := range tmpl {
		e.ID, e.Run = events.NewID(), id
		r.evs[i], r.allow[i] = e, allows(e)
		if js != nil {
			e.Seq, e.Prev = chain.Count+1, chain.Hash
			data, err := e.Encode()
			if err != nil {
				b.Fatal(err)
			}
			chain = events.Tail{Count: e.Seq, Hash: events.Hash(data)}
			r.msgs = append(r.msgs, &nats.Msg{Subject: log.Subject(id, e.Kind), Data: data})
		}
	}
	return r
}

// allows reports whether e is the write-ahead allow of a call (where the
// tool runs): a step.policy event, or a decision carrying its allow.
func allows(e events.Event) bool {
	pb, ok, _ := events.PolicyResult(e)
	return ok && e.Kind != events.ApprovalRequested && (pb.Outcome == events.Allow || pb.Consumes != "")
}

// append makes the run's appends; pause, when set, is called after each
// write-ahead allow (where the tool runs).
func (r *bareRun) append(ctx context.Context, pause func()) error {
	return r.appendRange(ctx, 0, len(r.evs), pause)
}

// appendRange makes the run's appends from event from up to event to.
func (r *bareRun) appendRange(ctx context.Context, from, to int, pause func()) error {
	filter := r.log.RunFilter(r.id)
	for i := from; i < to; i++ {
		e := r.evs[i]
		if r.js != nil {
			ack, err := r.js.PublishMsg(ctx, r.msgs[i], jetstream.WithMsgID(e.ID), jetstream.WithExpectLastSequenceForSubject(r.tail.Seq, filter))
			if err != nil {
				return err
			}
			r.tail.Seq = ack.Sequence
		} else {
			tail, err := r.log.Append(ctx, r.tail, e)
			if err != nil {
				return err
			}
			r.tail = tail
		}
		if pause != nil && r.allow[i] {
			pause()
		}
	}
	return nil
}

// BenchmarkDrive_OneRunVsBareAppends drives 200 runs of 50 steps per
// iteration, one after the other, with driver.Drive (agent, schema check,
// policy, tool, fold, fenced appends), and appends the same events (same
// kinds, same sizes, 151 per run) to as many other runs as bare fenced
// JetStream publishes, and again through events.Log.Append, rotating which
// goes first. It reports steps/s of the three and the ratios (goal:
// drive/bare ≤ 1.25; drive/log is the driver's cost over Arbiter's own
// appends). It runs twice: on the embedded server's in-process connection
// (the embedded default's worker), and over TCP on 127.0.0.1 (how the
// workers of a fleet connect).
func BenchmarkDrive_OneRunVsBareAppends(b *testing.B) {
	b.Run("in-process", func(b *testing.B) { benchOneRun(b, false) })
	b.Run("tcp", func(b *testing.B) { benchOneRun(b, true) })
}

func benchOneRun(b *testing.B, tcp bool) {
	const steps, runsPerOp = 50, 200
	env := testkit.JetStream(b)
	if tcp {
		nc, err := nats.Connect(env.Server.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		env = testkit.OnConn(b, env.Server, nc)
	}
	log := env.Log(b, events.Config{})
	ctx := benchCtx(b)
	d := benchDriver(b, log, 0, nil)
	tmpl := benchTemplate(b, ctx, d, steps)
	var inDrive, inBare, inLog time.Duration
	b.ResetTimer()
	for i := range b.N * runsPerOp {
		b.StopTimer()
		r, err := d.Create(ctx, "tmpl-"+events.NewID(), "bench", nil)
		if err != nil {
			b.Fatal(err)
		}
		bare := newBareRun(b, ctx, log, env.JS, tmpl)
		viaLog := newBareRun(b, ctx, log, nil, tmpl)
		b.StartTimer()
		drive := func() {
			start := time.Now()
			if err := d.Drive(ctx, r, testkit.Counter{Tool: "work", Steps: steps}); err != nil {
				b.Fatal(err)
			}
			inDrive += time.Since(start)
			if st := r.View().Run.Status; st != projector.Completed {
				b.Fatalf("run ended %s %s", st, r.View().Run.Detail)
			}
		}
		appendAll := func(r *bareRun, in *time.Duration) func() {
			return func() {
				start := time.Now()
				if err := r.append(ctx, nil); err != nil {
					b.Fatal(err)
				}
				*in += time.Since(start)
			}
		}
		order := []func(){drive, appendAll(bare, &inBare), appendAll(viaLog, &inLog)}
		for k := range order {
			order[(i+k)%len(order)]()
		}
	}
	b.StopTimer()
	n := float64(b.N * runsPerOp * steps)
	b.ReportMetric(n/inDrive.Seconds(), "drive-steps/s")
	b.ReportMetric(n/inBare.Seconds(), "bare-steps/s")
	b.ReportMetric(n/inLog.Seconds(), "log-steps/s")
	b.ReportMetric(float64(len(tmpl)), "appends/run")
	b.ReportMetric(inDrive.Seconds()/inBare.Seconds(), "drive/bare")
	b.ReportMetric(inDrive.Seconds()/inLog.Seconds(), "drive/log")
}

// benchFleet is one embedded JetStream with a log and a work queue.
type benchFleet struct {
	js  *testkit.JS
	log *events.Log
	q   *fleet.Queue
	s   *fleet.Snapshots
}

func newBenchFleet(b *testing.B, ctx context.Context) *benchFleet {
	b.Helper()
	js := testkit.JetStream(b)
	q, s, err := fleet.Setup(ctx, js.JS, fleet.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return &benchFleet{js: js, log: js.Log(b, events.Config{}), q: q, s: s}
}

// createRuns creates n runs and nudges each, before anything is timed.
func (f *benchFleet) createRuns(b *testing.B, ctx context.Context, d *driver.Driver, prefix string, n int) []string {
	b.Helper()
	ids := make([]string, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := f.q.Start(ctx, d, ids[i], "bench", nil); err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return ids
}

// runWorkers runs n workers of the given concurrency on d until the
// returned stop is called.
func (f *benchFleet) runWorkers(b *testing.B, d *driver.Driver, agent driver.Agent, n, concurrency int) (stop func()) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: f.q, Snapshots: f.s, Agents: map[string]driver.Agent{"bench": agent}, Concurrency: concurrency, CacheSize: 2 * concurrency})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(ctx) }()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	b.Cleanup(stop)
	return stop
}

// BenchmarkFleet_1000RunsTenMsTool drives 1,000 runs at once (10 or 50
// steps each: a 10 ms tool on every step but the last, then the terminal
// call) through fleet workers with 1,000 slots in all (one worker, or four
// of 250), and compares the steps/s against bare fenced appends of the same
// events by 1,000 goroutines, one run each, sleeping 10 ms where the tool
// runs (goal: fleet ≥ 70% of bare): raw JetStream publishes (bare), and
// events.Log.Append (log). It also reports the process's CPU per step for
// each, and the bare append ceiling with 16 and 1,000 goroutines and no
// tool. The fleet and the bare appends are each timed twice, in the order
// fleet, bare, bare, fleet, and the ratio is of their sums; fleet/bare-first
// is the first pair's alone.
func BenchmarkFleet_1000RunsTenMsTool(b *testing.B) {
	const runs, toolTime = 1000, 10 * time.Millisecond
	for _, shape := range []struct{ workers, concurrency, steps int }{{1, 1000, 10}, {4, 250, 10}, {1, 1000, 50}} {
		steps := shape.steps
		b.Run(fmt.Sprintf("workers=%d/steps=%d", shape.workers, steps), func(b *testing.B) {
			ctx := benchCtx(b)
			f := newBenchFleet(b, ctx)
			var finished atomic.Int64
			var all atomic.Pointer[chan struct{}]
			d := benchDriver(b, f.log, toolTime, func(k events.Kind, _ any, _ time.Duration, err error) {
				if err == nil && k == events.RunFinished && finished.Add(1) == runs {
					close(*all.Load())
				}
			})
			tmpl := benchTemplate(b, ctx, d, steps)
			// The machine's speed drifts over seconds (it is shared), more
			// than the difference measured: the fleet and the bare appends
			// are timed twice each, in the order fleet, bare, bare, fleet, so
			// that a drift that is steady over the four cancels out of the
			// ratio of their sums. Each fleet round drives 1,000 new runs.
			fleetRound := func(round int) (took, cpu time.Duration) {
				finished.Store(0)
				done := make(chan struct{})
				all.Store(&done)
				f.createRuns(b, ctx, d, fmt.Sprintf("fleet%d", round), runs)
				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime()
				stop := f.runWorkers(b, d, testkit.Counter{Tool: "work", Steps: steps}, shape.workers, shape.concurrency)
				select {
				case <-done:
				case <-ctx.Done():
					b.Fatalf("%d of %d runs finished", finished.Load(), runs)
				}
				took, cpu = time.Since(start), cpuTime()-cpu0
				b.StopTimer()
				stop()
				return took, cpu
			}
			bareRound := func() (took, cpu time.Duration) {
				cpu0 := cpuTime()
				took = bareConcurrent(b, ctx, f.log, f.js.JS, tmpl, runs, toolTime)
				return took, cpuTime() - cpu0
			}
			b.StopTimer()
			b.ResetTimer()
			fleet1, fleetCPU1 := fleetRound(1)
			bare1, bareCPU1 := bareRound()
			bare2, bareCPU2 := bareRound()
			fleet2, fleetCPU2 := fleetRound(2)
			fleetTime, fleetCPU := fleet1+fleet2, fleetCPU1+fleetCPU2
			bareTime, bareCPU := bare1+bare2, bareCPU1+bareCPU2

			cpu0 := cpuTime()
			logTime := bareConcurrent(b, ctx, f.log, nil, tmpl, runs, toolTime)
			logCPU := cpuTime() - cpu0
			total := float64(2 * runs * steps)
			fleetRate, bareRate := total/fleetTime.Seconds(), total/bareTime.Seconds()
			logRate := float64(runs*steps) / logTime.Seconds()
			b.ReportMetric(fleetRate, "fleet-steps/s")
			b.ReportMetric(bareRate, "bare-steps/s")
			b.ReportMetric(logRate, "log-steps/s")
			b.ReportMetric(fleetRate/bareRate, "fleet/bare")
			// The first pair alone, as the benchmark measured before the
			// second pair was added.
			b.ReportMetric(bare1.Seconds()/fleet1.Seconds(), "fleet/bare-first")
			b.ReportMetric(fleetRate/logRate, "fleet/log")
			// CPU used per step by the whole process (server included), µs.
			b.ReportMetric(float64(fleetCPU.Microseconds())/total, "fleet-cpu-µs/step")
			b.ReportMetric(float64(bareCPU.Microseconds())/total, "bare-cpu-µs/step")
			b.ReportMetric(float64(logCPU.Microseconds())/float64(runs*steps), "log-cpu-µs/step")
			for _, g := range []int{16, 1000} {
				t := bareConcurrent(b, ctx, f.log, f.js.JS, tmpl, g, 0)
				b.ReportMetric(float64(g*len(tmpl))/t.Seconds(), fmt.Sprintf("bare-appends/s-%dg", g))
			}
		})
	}
}

// bareConcurrent appends tmpl to runs new runs at once, one goroutine per
// run, sleeping pause after each step.policy, and returns how long it took:
// as raw JetStream publishes with js, through log.Append without.
func bareConcurrent(b *testing.B, ctx context.Context, log *events.Log, js jetstream.JetStream, tmpl []events.Event, runs int, pause time.Duration) time.Duration {
	b.Helper()
	bares := make([]*bareRun, runs)
	for i := range bares {
		bares[i] = newBareRun(b, ctx, log, js, tmpl)
	}
	var sleep func()
	if pause > 0 {
		sleep = func() { time.Sleep(pause) }
	}
	var wg sync.WaitGroup
	var failed atomic.Value
	start := time.Now()
	for _, r := range bares {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.append(ctx, sleep); err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return took
}

// benchEvents is the size of the interleaved stream: ARBITER_BENCH_EVENTS,
// or 1,000,000 (100,000 with -short).
func benchEvents() int {
	if s := os.Getenv("ARBITER_BENCH_EVENTS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 1000 {
			return n
		}
	}
	if testing.Short() {
		return 100_000
	}
	return 1_000_000
}

// BenchmarkLoad_InterleavedVsAlone times loading a run of 100 events: from
// a stream where it is alone, and from a stream of N events (default 1M)
// written round-robin across N/100 runs, so each run spans the whole stream.
// It loads with driver.Load (every event: the tail, then a batch get of
// exactly the run's events) and with fleet.Snapshots.Load from a snapshot (the
// KV entry, the tail, and the events after the snapshot: none, or one
// appended after it). Goal: interleaved within 2x of alone, with snapshots.
func BenchmarkLoad_InterleavedVsAlone(b *testing.B) {
	const perRun, sample = 100, 100
	total := benchEvents()
	nruns := total / perRun
	ctx := benchCtx(b)
	env := testkit.JetStream(b)
	_, snaps, err := fleet.Setup(ctx, env.JS, fleet.Config{WorkStream: "BENCH_WORK", WorkPrefix: "bench.work", Consumer: "bench", SnapshotBucket: "BENCH_VIEWS"})
	if err != nil {
		b.Fatal(err)
	}
	alone := env.Log(b, events.Config{Stream: "BENCH_ALONE", Prefix: "bench.alone"})
	inter := env.Log(b, events.Config{Stream: "BENCH_INTER", Prefix: "bench.inter"})
	start := time.Now()
	publishInterleaved(b, ctx, env.JS, alone, []string{"alone-00000"}, perRun)
	ids := make([]string, nruns)
	for i := range ids {
		ids[i] = fmt.Sprintf("inter-%05d", i)
	}
	publishInterleaved(b, ctx, env.JS, inter, ids, perRun)
	b.Logf("stream of %d events across %d runs written in %s", nruns*perRun, nruns, time.Since(start).Round(time.Millisecond))

	dAlone := benchLoadDriver(b, alone)
	dInter := benchLoadDriver(b, inter)
	// Loads rotate over a sample of runs spread over the stream; the alone
	// stream has one run.
	picks := make([]string, sample)
	for i := range picks {
		picks[i] = ids[i*nruns/sample]
	}
	cases := []struct {
		name string
		d    *driver.Driver
		runs []string
	}{{"alone", dAlone, []string{"alone-00000"}}, {"interleaved", dInter, picks}}
	for _, c := range cases {
		for _, id := range c.runs {
			r, err := c.d.Load(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if err := snaps.Save(ctx, r); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Each iteration loads loads runs: 20 with every event read (those take
	// up to a tenth of a second each in the interleaved stream), 500 from
	// snapshots. The figure is µs per load.
	load := func(b *testing.B, d *driver.Driver, runs []string, snap bool, want uint64) {
		loads := 500
		if !snap {
			loads = 20
		}
		for i := range b.N * loads {
			id := runs[i%len(runs)]
			var r *driver.Run
			var err error
			if snap {
				var from bool
				r, from, err = snaps.Load(ctx, d, id)
				if err == nil && !from {
					b.Fatalf("load %s: not from its snapshot", id)
				}
			} else {
				r, err = d.Load(ctx, id)
			}
			if err != nil {
				b.Fatal(err)
			}
			if r.Tail().Count != want {
				b.Fatalf("load %s: %d events, want %d", id, r.Tail().Count, want)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*loads), "µs/load")
	}
	for _, c := range cases {
		b.Run(c.name+"/events", func(b *testing.B) { load(b, c.d, c.runs, false, perRun) })
		b.Run(c.name+"/snapshot", func(b *testing.B) { load(b, c.d, c.runs, true, perRun) })
	}
	// One more event on each loaded run, after its snapshot: at the end of
	// the stream, past everything else.
	for _, c := range cases {
		for _, id := range c.runs {
			tail, err := c.d.Log().Tail(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			ev, err := events.New(id, events.StepDecided, events.StepDecidedBody{Step: (perRun-1)/3 + 1, Tool: "work", Args: `{"n":0}`})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.d.Log().Append(ctx, tail, ev); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, c := range cases {
		b.Run(c.name+"/snapshot+1", func(b *testing.B) { load(b, c.d, c.runs, true, perRun+1) })
	}
	// The tail lookup alone (the run's last message, which after one append
	// is the one event past the snapshot): what snapshot+1 would cost if the
	// load used that message instead of a batch get after the snapshot.
	for _, c := range cases {
		b.Run(c.name+"/tail", func(b *testing.B) {
			const loads = 500
			for i := range b.N * loads {
				if _, err := c.d.Log().Tail(ctx, c.runs[i%len(c.runs)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*loads), "µs/load")
		})
	}
}

func benchLoadDriver(b *testing.B, log *events.Log) *driver.Driver {
	b.Helper()
	d, err := driver.New(driver.Config{Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "bench")})
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// publishInterleaved writes perRun chained events to each of runs,
// round-robin (event i of every run, then event i+1), with async publishes
// of pre-encoded events: run.created, then (step.decided, step.policy,
// step.observed) triples, the shape of a driven run.
func publishInterleaved(b *testing.B, ctx context.Context, js jetstream.JetStream, log *events.Log, runs []string, perRun int) {
	b.Helper()
	prev := make([]string, len(runs))
	created, _ := json.Marshal(events.RunCreatedBody{Agent: "bench", Limits: driver.DefaultLimits})
	for i := range perRun {
		step := (i-1)/3 + 1
		var kind events.Kind
		var body []byte
		switch {
		case i == 0:
			kind, body = events.RunCreated, created
		case (i-1)%3 == 0:
			kind, body = events.StepDecided, mustJSON(b, events.StepDecidedBody{Step: step, Tool: "work", Args: fmt.Sprintf(`{"n":%d}`, step)})
		case (i-1)%3 == 1:
			kind, body = events.StepPolicy, mustJSON(b, events.PolicyBody{Step: step, Outcome: "allow", Reason: "read_only tool work", PolicyID: "bench", Args: json.RawMessage(fmt.Sprintf(`{"n":%d}`, step)), ToolHash: "0000000000000000000000000000000000000000000000000000000000000000"})
		default:
			kind, body = events.StepObserved, mustJSON(b, events.ObservedBody{Step: step, Kind: events.ObsResult, Content: "ok"})
		}
		for r, run := range runs {
			e := events.Event{V: events.FormatVersion, ID: events.NewID(), Run: run, Seq: uint64(i + 1), Kind: kind, Time: time.Now().UTC(), Prev: prev[r], Body: body}
			data, err := e.Encode()
			if err != nil {
				b.Fatal(err)
			}
			prev[r] = events.Hash(data)
			if _, err := js.PublishMsgAsync(&nats.Msg{Subject: log.Subject(run, kind), Data: data}, jetstream.WithMsgID(e.ID)); err != nil {
				b.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		}
	}
}

func mustJSON(b *testing.B, v any) []byte {
	b.Helper()
	out, err := json.Marshal(v)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkWorker_MemoryWith1000RunsInFlight measures the heap a worker
// holds with 1,000 runs in flight: every run inside its tool at once. The
// figure is the growth of HeapInuse (after a GC) from before the worker
// starts, with the runs created and nudged, to the moment all 1,000 calls
// are executing; the growth of goroutine stacks and the goroutines per run
// are reported beside it. The embedded server runs in the same process, so its share
// of the in-flight state (1,000 delivered, unacknowledged nudges) is in it.
func BenchmarkWorker_MemoryWith1000RunsInFlight(b *testing.B) {
	const runs = 1000
	ctx := benchCtx(b)
	f := newBenchFleet(b, ctx)
	release := make(chan struct{})
	var arrived atomic.Int64
	hold := testkit.NewLedger("work", events.ReadOnly, testkit.AnyObject)
	hold.S.Timeout = 10 * time.Minute
	hold.Result = func(ctx context.Context, _ json.RawMessage) (string, error) {
		arrived.Add(1)
		select {
		case <-release:
			return "ok", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	var finished atomic.Int64
	d, err := driver.New(driver.Config{
		Log: f.log, Policy: policy.WithID(policy.DefaultSideEffects(), "bench"), Tools: []driver.Tool{hold, done},
		OnAppend: func(k events.Kind, _ any, _ time.Duration, err error) {
			if err == nil && k == events.RunFinished {
				finished.Add(1)
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	f.createRuns(b, ctx, d, "mem", runs)
	before, g0 := memStats(), runtime.NumGoroutine()
	b.ResetTimer()
	stop := f.runWorkers(b, d, testkit.Counter{Tool: "work", Steps: 2}, 1, runs)
	waitCount(b, &arrived, runs, time.Minute)
	during, g1 := memStats(), runtime.NumGoroutine()
	b.StopTimer()
	close(release)
	waitCount(b, &finished, runs, time.Minute)
	stop()
	heap := float64(during.HeapInuse) - float64(before.HeapInuse)
	stack := float64(during.StackInuse) - float64(before.StackInuse)
	b.ReportMetric(heap/(1<<20), "heap-MiB")
	b.ReportMetric(heap/runs, "heap-B/run")
	b.ReportMetric(stack/runs, "stack-B/run")
	b.ReportMetric(float64(g1-g0)/runs, "goroutines/run")
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memStats reads the memory statistics after two collections.
func memStats() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

func waitCount(b *testing.B, c *atomic.Int64, n int64, wait time.Duration) {
	b.Helper()
	deadline := time.Now().Add(wait)
	for c.Load() < n {
		if time.Now().After(deadline) {
			b.Fatalf("got %d of %d after %s", c.Load(), n, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
