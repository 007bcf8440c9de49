package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/arbiter-run/arbiter/internal/stack"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go/jetstream"
)

// WorkerConfig builds a [Worker].
type WorkerConfig struct {
	// Driver drives the runs. Required.
	Driver *driver.Driver
	// Queue is the fleet's work queue (from [Setup], [Attach] or
	// [NewQueue]). Required.
	Queue *Queue
	// Snapshots, when set, is where the worker saves the view of a run it
	// gives back and loads a run it does not hold in memory from (from
	// [Setup], [Attach] or [NewSnapshots]). Nil: no snapshots; a run the
	// worker does not hold is folded from all its events, which is correct
	// and slower for long runs.
	Snapshots *Snapshots
	// Agents by the name a run was created with; the "" entry, if any,
	// drives runs whose agent has no entry of its own.
	Agents map[string]driver.Agent
	// Defaults are the run defaults of some of Agents (same keys): the
	// actor and surface a run of that agent is created with when its
	// starter names none. The worker advertises them with the agent in the
	// agents registry and never applies them itself (see [RunDefaults]).
	Defaults map[string]RunDefaults
	// Concurrency is how many runs the worker drives at once. Default 16.
	// Why 16: a run in flight mostly waits on its model call or its tool
	// (the driver's own work is tens of microseconds of CPU a step, ADR
	// 0006), so the bound is not the CPU but what one worker may have
	// outstanding at once: model calls against one API key's rate limit and
	// budget, tool calls against the systems they reach, and the views it
	// holds. A small fixed number keeps that predictable per worker; a
	// fleet scales by adding workers. Raise it for agents and tools that
	// allow more at once. Negative is an error.
	Concurrency int
	// CancelPoll is how often the worker looks for cancellations of the
	// runs it drives, to stop their steps in flight at once: one read per
	// shard with a run in flight, however many. Default
	// [DefaultCancelPoll].
	CancelPoll time.Duration
	// Grace bounds how long a shutdown waits for the steps in flight.
	// Default 30s.
	Grace time.Duration
	// CacheSize is how many views the worker keeps in memory. Default 1024.
	CacheSize int
	// Logger; default discards.
	Logger *slog.Logger
	// Metrics, when set, are updated as the worker goes.
	Metrics *Metrics
}

// Worker takes nudges from the work queue and drives the runs they name.
type Worker struct {
	cfg   WorkerConfig
	d     *driver.Driver
	q     *Queue
	snaps *Snapshots
	log   *slog.Logger
	cache *cache

	mu       sync.Mutex
	inFlight map[string]bool
	stalled  map[string]bool
	cancels  *cancels
}

// NewWorker checks cfg and builds a worker.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if cfg.Driver == nil || cfg.Queue == nil {
		return nil, errors.New("new worker: a driver and a queue are required")
	}
	for name, d := range cfg.Defaults {
		if _, ok := cfg.Agents[name]; !ok {
			return nil, fmt.Errorf("new worker: run defaults for agent %q, which the worker does not have", name)
		}
		if err := d.Validate(); err != nil {
			return nil, fmt.Errorf("new worker: run defaults for agent %q: %w", name, err)
		}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	if cfg.Concurrency < 0 {
		return nil, fmt.Errorf("new worker: concurrency %d", cfg.Concurrency)
	}
	if cfg.Grace == 0 {
		cfg.Grace = 30 * time.Second
	}
	if cfg.CancelPoll <= 0 {
		cfg.CancelPoll = DefaultCancelPoll
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 1024
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Worker{cfg: cfg, d: cfg.Driver, q: cfg.Queue, snaps: cfg.Snapshots, log: cfg.Logger, cache: newCache(cfg.CacheSize), inFlight: map[string]bool{}, stalled: map[string]bool{}, cancels: newCancels()}, nil
}

// Start creates run with agent and input and nudges the fleet to drive it.
func (q *Queue) Start(ctx context.Context, d *driver.Driver, run, agent string, input []byte) error {
	if _, err := d.Create(ctx, run, agent, input); err != nil {
		return err
	}
	return q.Nudge(ctx, run, nudgeCreated)
}

// nudgeCreated is why a run's first nudge was sent (see [Queue.Nudge]).
const nudgeCreated = "created"

// Run takes work until ctx is done, then stops taking work, lets each run in
// flight finish its current transition (at most Grace), gives those runs
// back to the queue, and returns.
func (w *Worker) Run(ctx context.Context) error {
	if _, err := w.q.js.Consumer(ctx, w.q.cfg.WorkStream, w.q.cfg.Consumer); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	inbox, err := jsinbox.For(w.q.js.Conn())
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	stop := make(chan struct{})
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	go w.advertise(ctx)
	go w.watchCancels(hard)
	slots := make(chan struct{}, w.cfg.Concurrency)
	var wg sync.WaitGroup
	for ctx.Err() == nil {
		free := w.cfg.Concurrency - len(slots)
		if free == 0 {
			select {
			case slots <- struct{}{}:
				<-slots
			case <-ctx.Done():
			}
			continue
		}
		// Pulled with jsinbox, not the client's Fetch: a nudge is a
		// delivery by its ack subject, never taken for a status of the
		// server's by its headers (see jsinbox.Pull), so no one who may
		// nudge can stop a fetch, or the queue behind it.
		batch, err := inbox.Pull(ctx, jsinbox.APIPrefix(w.q.js), w.q.cfg.WorkStream, w.q.cfg.Consumer, free, time.Second)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			w.log.Warn("fetch work", "err", err)
			sleep(ctx, 500*time.Millisecond)
			continue
		}
		for {
			// Read to the pull's end even once ctx is done (at most its
			// one second): the server may still deliver to it, and a
			// delivery nobody reads waits out its ack wait before anyone
			// else gets it. What comes is handled as a fetch's messages
			// always were (handle sees stop).
			msg, err := batch.Next(hard)
			if err != nil {
				if !errors.Is(err, io.EOF) && ctx.Err() == nil {
					w.log.Warn("fetch work", "err", err)
				}
				break
			}
			slots <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				// A run's load and drive need a 32 KB stack; this new
				// goroutine would grow its 2 KB one by doubling, copying
				// it at each step.
				stack.Grow()
				w.handle(hard, msg, stop)
			}()
		}
	}
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.Grace):
		w.log.Warn("shutdown grace passed; abandoning steps in flight", "grace", w.cfg.Grace)
		cancelHard()
		<-done
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// handle drives the run a nudge names, and settles the nudge.
func (w *Worker) handle(ctx context.Context, msg nudge, stop <-chan struct{}) {
	subject := strings.TrimPrefix(msg.Subject(), w.q.cfg.WorkPrefix+".")
	run, timer, _ := strings.Cut(subject, ".")
	if !w.claim(run) {
		// Another goroutine of this worker drives the run: try later.
		_ = msg.NakWithDelay(200 * time.Millisecond)
		return
	}
	defer w.release(run)
	w.cfg.Metrics.inFlight(1)
	defer w.cfg.Metrics.inFlight(-1)
	defer func() {
		// A bug that panics while one run is driven must not take the
		// worker, and every other run it holds, down with it: the run is
		// given back with a growing delay and the panic logged.
		if p := recover(); p != nil {
			w.cache.drop(run)
			w.markStalled(run, true)
			w.log.Error("panic while driving run; it is given back", "run", run, "panic", p, "stack", string(debug.Stack()))
			_ = msg.NakWithDelay(backoff(delivered(msg)))
		}
	}()

	r, err := w.load(ctx, run, created(msg))
	switch {
	case (errors.Is(err, events.ErrNoRun) || permanent(err)) && delivered(msg) < giveUpAfter:
		// Right after a leader change a replica that is not yet current can
		// answer a read without the run's latest events (the tail names
		// events the batch read does not return, or no run at all): look
		// again before giving the run up
		// (faulttest.TestWorker_NudgeForRunNotYetReadableIsKept).
		w.log.Warn("run does not load; looking again before giving it up", "run", run, "err", err)
		_ = msg.NakWithDelay(time.Duration(delivered(msg)) * time.Second)
		return
	case errors.Is(err, events.ErrNoRun):
		_ = msg.Term()
		return
	case permanent(err):
		// A run whose events do not verify or fold can never be driven:
		// fail closed and say so loudly, once.
		w.cfg.Metrics.unloadable()
		w.log.Error("run cannot be loaded; it will not be driven", "run", run, "err", err)
		_ = msg.Term()
		return
	case err != nil:
		w.log.Warn("load run", "run", run, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	agentName, status := runOf(r)
	if strings.HasPrefix(agentName, GateAgentPrefix) {
		// A gate run is driven by the program that opened it (see gate/):
		// it takes in its own decisions and runs its own calls. A worker
		// that settled it would resume the call where its program cannot
		// see the result.
		_ = msg.Ack()
		return
	}
	if timer == "expiry" {
		if !w.expiryDue(r, msg) {
			return
		}
	}
	agent := w.cfg.Agents[agentName]
	if agent == nil {
		agent = w.cfg.Agents[""]
	}
	if agent == nil && status == projector.Running && w.d.NeedsAgent(r) {
		if !w.noAgent(ctx, r, msg) {
			_ = msg.NakWithDelay(time.Duration(min(delivered(msg), 5)) * time.Second)
		}
		return
	}
	watched, cancelled := w.watchCancel(ctx, r)
	busyCtx := driver.WithBusy(watched, w.q.cfg.AckWait/3, func() { _ = msg.InProgress() })
	err = w.d.DriveUntil(busyCtx, r, agent, stop)
	switch {
	case cancelled():
		// The run was cancelled while we drove it: whatever the step in
		// flight tried to append after was refused by the fence. Nothing
		// is left to do for it.
		w.markStalled(run, false)
		w.cache.drop(run)
		_ = msg.Ack()
		return
	case errors.Is(err, events.ErrConflict):
		// Someone else moved the run: stop driving it at once, forget our
		// view, and let the queue hand the run to whoever should have it.
		w.cfg.Metrics.conflict()
		w.markStalled(run, false)
		w.cache.drop(run)
		w.log.Info("run moved under us; dropping it", "run", run)
		_ = msg.NakWithDelay(100 * time.Millisecond)
		return
	case errors.Is(err, driver.ErrStopped):
		w.keep(ctx, r)
		_ = msg.Nak()
		return
	case err != nil:
		// The log did not take an append, or a read failed: keep the view
		// (with the agent's decision it could not record, so the agent is
		// not asked again) and try again later, waiting longer each time.
		w.cache.put(r)
		wait := backoff(delivered(msg))
		w.markStalled(run, true)
		w.log.Warn("drive run failed; retrying with backoff", "run", run, "err", err, "retry_in", wait)
		_ = msg.NakWithDelay(wait)
		return
	}
	w.markStalled(run, false)
	w.keep(ctx, r)
	if statusOf(r) == projector.Running || w.d.NeedsAgent(r) {
		// Stopped where a decision is needed (or a budget grant is to be
		// used) and this worker has no agent for the run: leave it to one
		// that has.
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	if statusOf(r).Ended() {
		// Nothing moves an ended run: an ack that is lost only brings the
		// nudge back once, to a worker that finds the run ended and acks it
		// again. No need to wait for the server to confirm this one.
		if err := msg.Ack(); err != nil {
			w.log.Warn("ack nudge", "run", run, "err", err)
		}
		return
	}
	if err := msg.DoubleAck(ctx); err != nil {
		w.log.Warn("ack nudge", "run", run, "err", err)
	}
	w.afterAck(ctx, r)
}

// afterAck closes the window between the last look at a run and the ack of
// its nudge: anything that came meanwhile had its own nudge refused as a
// duplicate (one waits per run), so nudge the run again if it came. That
// is an event appended to the run (its tail moved), or, for a run waiting
// on an approval, an operator's decision, which is published on the
// decisions stream and appended to the run only when a worker takes it
// in: a grant published after the drive's last read of that stream was
// otherwise lost, and the run waited for ever. A run left waiting on an
// approval with an expiry gets a timer, so it expires whether or not
// anyone looks at it then.
func (w *Worker) afterAck(ctx context.Context, r *driver.Run) {
	if statusOf(r).Ended() {
		return // a decision arriving now changes nothing; no nudge to lose
	}
	tail, err := w.d.Log().Tail(ctx, r.ID())
	if err == nil && tail != r.Tail() {
		_ = w.q.Nudge(ctx, r.ID(), fmt.Sprintf("moved-%d", tail.Count))
	}
	v := r.View()
	if a := v.PendingApproval(); v.Run.Status == projector.Waiting && a != nil && a.State == projector.Pending {
		// Read after the ack: a decision whose nudge was refused was
		// stored before it, and one stored after it had its nudge taken.
		msgs, err := decisions.Read(ctx, w.d.Log(), r.ID(), v.Intake, 1)
		switch {
		case err != nil:
			_ = w.q.Nudge(ctx, r.ID(), "intake") // cannot tell: look again
		case len(msgs) > 0:
			_ = w.q.Nudge(ctx, r.ID(), fmt.Sprintf("intake-%d", msgs[0].Sequence))
		}
	}
	if v.Run.Status == projector.Waiting {
		if a := v.PendingApproval(); a != nil && a.ExpiresAt != nil {
			if err := w.q.timer(ctx, r.ID(), a.ID); err != nil {
				w.log.Warn("expiry timer", "run", r.ID(), "err", err)
			}
		}
	}
}

// noAgent handles run r, which needs an agent this worker does not have.
// When no live worker offers it either (and the nudge has come back
// noAgentAfter times, so a worker starting up has had time to say what it
// offers), the run is failed with the reason recorded. It reports whether
// it settled the nudge.
func (w *Worker) noAgent(ctx context.Context, r *driver.Run, msg nudge) bool {
	v := r.View()
	offered, err := w.q.Offered(ctx, v.Run.Agent)
	if err != nil || offered || delivered(msg) < noAgentAfter {
		w.log.Warn("no agent for run here; leaving it to a worker that has one", "run", r.ID(), "agent", v.Run.Agent, "offered_elsewhere", offered, "err", err)
		return false
	}
	names, _ := w.q.Agents(ctx)
	detail := fmt.Sprintf("no worker offers agent %q (offered: %s)", v.Run.Agent, strings.Join(names, ", "))
	if err := w.d.Fail(ctx, r, events.ReasonNoAgent, detail); err != nil {
		w.log.Warn("fail run with no agent", "run", r.ID(), "err", err)
		return false
	}
	w.cfg.Metrics.noAgent()
	w.log.Error("run failed: no worker offers its agent", "run", r.ID(), "agent", v.Run.Agent)
	w.cache.drop(r.ID())
	_ = msg.Ack()
	return true
}

// noAgentAfter is how many deliveries of a run's nudge find no worker
// offering its agent before the run is failed.
const noAgentAfter = 3

// expiryDue handles an expiry timer: when its approval is not yet due it is
// put back for the time left; when the run no longer waits it is dropped.
// It reports whether the run should be driven now.
func (w *Worker) expiryDue(r *driver.Run, msg nudge) bool {
	v := r.View()
	a := v.PendingApproval()
	if v.Run.Status != projector.Waiting || a == nil || a.ExpiresAt == nil || a.State != projector.Pending {
		_ = msg.Ack()
		return false
	}
	if left := time.Until(*a.ExpiresAt); left > 0 {
		_ = msg.NakWithDelay(left + 10*time.Millisecond)
		return false
	}
	return true
}

func (w *Worker) keep(ctx context.Context, r *driver.Run) {
	if statusOf(r).Ended() {
		// Nobody drives an ended run again: no view to keep. Its snapshot
		// may stay at a point the run has passed; that costs a longer read
		// if the run is ever loaded, never a wrong view, because a read
		// from a snapshot goes on to the run's last message and verifies
		// every event on the way (events.Log.Since).
		w.cache.drop(r.ID())
		return
	}
	w.cache.put(r)
	if w.snaps == nil {
		return
	}
	if err := w.snaps.Save(ctx, r); err != nil {
		w.log.Warn("snapshot", "run", r.ID(), "err", err)
	}
}

// load returns run from the worker's memory brought up to date, or from its
// snapshot (when the worker keeps snapshots and the run is not new), or
// from its events.
func (w *Worker) load(ctx context.Context, run string, isNew bool) (*driver.Run, error) {
	if r := w.cache.get(run); r != nil {
		if err := w.d.Refresh(ctx, r); err == nil {
			return r, nil
		}
		w.cache.drop(run)
	}
	if w.snaps == nil || isNew {
		return w.d.Load(ctx, run)
	}
	r, _, err := w.snaps.Load(ctx, w.d, run)
	return r, err
}

// runOf reads r's agent and status without copying its view.
func runOf(r *driver.Run) (agent string, status projector.Status) {
	r.Peek(func(v *projector.View) { agent, status = v.Run.Agent, v.Run.Status })
	return agent, status
}

// statusOf is r's status, read without copying its view.
func statusOf(r *driver.Run) projector.Status {
	_, s := runOf(r)
	return s
}

// GateAgentPrefix starts the agent name of a run a gate drives (gate.AgentPrefix):
// fleet workers leave such runs alone.
const GateAgentPrefix = "gate:"

// backoff is how long a run whose drive failed waits before the n-th
// delivery of its nudge: one second, doubling, at most a minute.
func backoff(n uint64) time.Duration {
	d := time.Second
	for i := uint64(1); i < n && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// Stalled lists the runs whose last drive on this worker failed (an append
// the server did not take, a read that failed) and that wait to be retried,
// sorted: what the worker's /healthz shows.
func (w *Worker) Stalled() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.stalled))
	for id := range w.stalled {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// markStalled keeps the stalled gauge: run's last drive failed or not.
func (w *Worker) markStalled(run string, stalled bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stalled[run] == stalled {
		return
	}
	if stalled {
		w.stalled[run] = true
		w.cfg.Metrics.stalled(1)
	} else {
		delete(w.stalled, run)
		w.cfg.Metrics.stalled(-1)
	}
}

func permanent(err error) bool {
	return errors.Is(err, events.ErrBrokenChain) || errors.Is(err, events.ErrMalformed) || errors.Is(err, projector.ErrFold)
}

// giveUpAfter is how many deliveries of a nudge find its run unloadable
// before the nudge is terminated (the waits between them add up to 10s).
const giveUpAfter = 5

// delivered is how many times msg has been delivered (1 if unknown).
// created reports whether msg is the nudge that started its run (see
// [Queue.Start]) on its first delivery: no worker has driven the run yet,
// so it has no snapshot to look up, one read of the key-value store less
// for every run. The id is the publisher's to choose, and a nudge that
// claims it wrongly costs only the snapshot's shortcut: the run is read
// from its events, as it is without snapshots, and never wrongly.
func created(msg nudge) bool {
	return strings.HasSuffix(msg.Headers().Get(jetstream.MsgIDHeader), "/"+nudgeCreated) && delivered(msg) == 1
}

func delivered(msg nudge) uint64 {
	if n := msg.NumDelivered(); n > 0 {
		return n
	}
	return 1
}

func (w *Worker) claim(run string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inFlight[run] {
		return false
	}
	w.inFlight[run] = true
	return true
}

func (w *Worker) release(run string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.inFlight, run)
}

// timer publishes the expiry timer of run's approval: a message on its own
// subject, so it never displaces a nudge.
func (q *Queue) timer(ctx context.Context, run, approval string) error {
	return q.publishOnce(ctx, q.cfg.WorkPrefix+"."+run+".expiry", run+"/expiry/"+approval)
}

// nudge is a work message as the worker settles it.
type nudge = *jsinbox.Delivery
