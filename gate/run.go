package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/stack"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/projector"
)

// Run is a gate run held by one program. One call is asked at a time: an
// Ask waits for the one before it, and an allowed call must be reported
// before the next is asked.
type Run struct {
	g    *Gate
	id   string
	life context.Context // ends at Close: the drive of an allowed call lives in it
	stop context.CancelFunc

	mu       sync.Mutex
	r        *driver.Run // owned by the drive goroutine while a call is in flight
	inflight *call       // the allowed call not yet reported
	// stale is set when a drive failed other than on a conflict (the log
	// away, say): the run is read again from the log before the next
	// call, since what the failed drive sent may or may not be stored,
	// and the driver would otherwise send the decision it could not
	// store again, as the next call's, whatever that call is.
	stale bool
	// unran is the step of a call whose drive failed before anything ran
	// it (0: none): once the run is read again, if it ends with the very
	// allow this process sent (stored though unconfirmed), that allow gets
	// the observation that it did not run (see reload), rather than being
	// taken for a call that may still be running, or was interrupted.
	unran int
	// over is the step of a call whose drive failed after the call ran
	// here, or was handed to the program, which reported it (0: none): it
	// runs nowhere now. Once the run is read again, if it ends with this
	// process's own allow of it, it is not taken for a call that may still
	// be running (recoverNow, at tail recoverAt): recovery settles it at
	// once.
	over       int
	recoverNow int
	recoverAt  events.Tail
	// calling is set while Call holds mu through a call, so that View
	// answers at once instead of waiting for the call to end.
	calling atomic.Bool

	// watched is the pending approval whose expiry timer is armed (under
	// mu): see watch.
	watched string
	tmu     sync.Mutex // guards timer, which Close stops without mu
	timer   *time.Timer
}

// ID is the run's id.
func (r *Run) ID() string { return r.id }

// View returns a copy of the run's view as this process last saw it.
func (r *Run) View() (projector.View, error) {
	if r.calling.Load() {
		return projector.View{}, fmt.Errorf("view of run %s: %w", r.ID(), ErrUnreported)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight != nil {
		return projector.View{}, fmt.Errorf("view of run %s: %w", r.ID(), ErrUnreported)
	}
	return r.r.View(), nil
}

// Close ends this process's hold on the run. An allowed call not yet
// reported is left to recovery, as a crash would leave it: the next
// process to ask on the run recovers it.
func (r *Run) Close() {
	r.stop()
	r.tmu.Lock()
	if r.timer != nil {
		r.timer.Stop()
	}
	r.tmu.Unlock()
}

// TakeIn records what operators decided on the approval the run waits on,
// and its expiry once passed, and runs nothing (see [driver.Driver.TakeIn]):
// a denied or expired call ends the run, a granted one waits for the same
// call to be asked again. A reader of the run's state (the gateway's status
// tool) calls it before [Run.View]. While a call is being asked or run it
// returns at once and does nothing: that call takes them in itself. Every
// call does so anyway; and while this process holds the run, an approval's
// expiry is recorded when it passes, whether or not anything is asked then.
func (r *Run) TakeIn(ctx context.Context) error {
	if r.calling.Load() || !r.mu.TryLock() {
		return nil
	}
	defer r.mu.Unlock()
	if r.inflight != nil {
		return nil
	}
	defer r.watch()
	if !r.stale {
		// A reader is told the run as the log has it, what other
		// processes recorded included (a stale run is read whole below).
		if err := r.g.d.Refresh(ctx, r.r); err != nil {
			return fmt.Errorf("take in decisions on run %s: %w", r.ID(), err)
		}
	}
	return r.takeIn(ctx, "take in decisions")
}

// takeIn is TakeIn under mu; what names the caller in an error.
func (r *Run) takeIn(ctx context.Context, what string) error {
	if err := r.reload(ctx, what); err != nil {
		return err
	}
	err := r.g.d.Deliver(ctx, r.r)
	if err == nil {
		err = r.g.d.TakeIn(ctx, r.r)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, events.ErrConflict):
		_, err = r.movedOn(what, err)
		return err
	}
	r.stale = true
	return fmt.Errorf("%s on run %s: %w", what, r.ID(), err)
}

// watch arms a timer for the pending approval with a deadline that the
// run waits on, unless one is armed for it. While this process holds the
// run, the timer takes in what came for the approval every takeInEvery and
// just after the deadline: a grant or a denial is recorded within a second
// of its arrival, so that one sent in time is judged in time (a decision
// is judged by when it is read), and the expiry is recorded when it
// passes, whether or not the program asks anything. Under mu, or before
// the run is handed out.
func (r *Run) watch() { r.watchAfter("") }

// staleWatch is what the timer watches for a run read again after a
// failed call (see watchAfter), in place of an approval's id.
const staleWatch = "(stale)"

// takeInEvery is how often a held run waiting on an approval with a
// deadline reads what operators decided on it.
const takeInEvery = time.Second

// watchAfter is watch from the timer, which has just taken in the approval
// was: if that one still waits past its deadline (the log was away, or the
// gate's clock disagrees), it is looked at again takeInEvery later.
func (r *Run) watchAfter(was string) {
	if r.inflight != nil || r.life.Err() != nil {
		return // the drive of the call in flight owns r.r
	}
	var (
		id   string
		wait time.Duration
	)
	if r.stale {
		// A call failed with the log away: what it leaves to record (a
		// result this process holds, a call it never ran) is recorded
		// once the log is back, whether or not anything is asked then.
		id, wait = staleWatch, takeInEvery
	} else {
		var at time.Time
		r.r.Peek(func(v *projector.View) {
			if a := v.PendingApproval(); v.Run.Status == projector.Waiting && a != nil && a.State == projector.Pending && a.ExpiresAt != nil {
				id, at = a.ID, *a.ExpiresAt
			}
		})
		left := at.Sub(r.g.now())
		wait = min(max(left+10*time.Millisecond, 0), takeInEvery) // just after the deadline at the latest
		if id == was && left <= 0 {
			wait = takeInEvery
		}
	}
	if id == "" || id == r.watched {
		return
	}
	r.watched = id
	r.rearm(wait)
}

// rearm replaces the timer with one that fires after wait, unless the run
// is closed: the run has one at a time, which Close stops.
func (r *Run) rearm(wait time.Duration) {
	r.tmu.Lock()
	defer r.tmu.Unlock()
	if r.life.Err() != nil {
		return
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timer = time.AfterFunc(wait, r.expire)
}

// expire is the timer's: it takes in what came for the approval, its
// expiry included, and watches it, or the next one, again.
func (r *Run) expire() {
	if r.life.Err() != nil {
		return
	}
	if r.calling.Load() || !r.mu.TryLock() {
		// A call holds the run: it takes in the expiry itself; the timer
		// looks again soon in case that call ended just before.
		r.rearm(50 * time.Millisecond)
		return
	}
	defer r.mu.Unlock()
	was := r.watched
	r.watched = ""
	if r.inflight == nil {
		_ = r.takeIn(r.life, "take in decisions") // on failure, tried again below
	}
	r.watchAfter(was)
}

// Ask asks whether tool may run with args (the exact bytes the model
// produced). The request is recorded before anything checks it. The answer
// is [Allow] (the write-ahead record is stored: run the call with
// Answer.Args, then [Run.Report]), [Deny] with what to show the model, or
// [Pending] on an approval. While the run waits on an approval, asking the
// same call again (same tool, the same arguments in PolicyJSON form) takes
// in the operator's decision and, on a grant, consumes it: Allow; asking
// another call fails with a [*WaitingError]. Other errors: [*EndedError],
// [ErrUnreported], [ErrElsewhere] (another process holds the run), and the
// log's.
func (r *Run) Ask(ctx context.Context, tool string, args json.RawMessage) (Answer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inflight != nil {
		return Answer{}, fmt.Errorf("ask %s on run %s: %w (step %d)", tool, r.ID(), ErrUnreported, r.inflight.expect)
	}
	if err := ctx.Err(); err != nil {
		return Answer{}, fmt.Errorf("ask %s on run %s: %w", tool, r.ID(), err)
	}
	defer r.watch()
	c, err := r.plan(ctx, tool, args)
	if err != nil {
		return Answer{}, err
	}
	// The program runs the call between Ask and Report, so the drive,
	// which waits in the proxy meanwhile, has a goroutine of its own.
	c.allowed, c.result, c.late, c.abandoned, c.done = make(chan allowed), make(chan report), make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		stack.Grow()
		c.done <- r.drive(c)
	}()
	select {
	case a := <-c.allowed:
		r.inflight = c
		return Answer{Verdict: Allow, Step: a.step, Args: a.args}, nil
	case err := <-c.done:
		return r.settled(c, err)
	case <-ctx.Done():
		close(c.abandoned)
		// The drive goes on to its end (nothing it hands out is taken);
		// the next Ask waits for it under the lock.
		err := <-c.done
		if _, serr := r.settled(c, err); serr != nil && !errors.Is(serr, context.Canceled) {
			return Answer{}, serr
		}
		return Answer{}, fmt.Errorf("ask %s on run %s: %w", tool, r.ID(), ctx.Err())
	}
}

// Call is [Run.Ask] and [Run.Report] in one, for a caller that runs the
// call itself as soon as it is allowed (the gateway): when the call is
// allowed (the write-ahead record stored), fn is called with the
// arguments the gate allowed (Answer.Args of an Allow), on this goroutine,
// and what it returns is recorded as Report records it. fn must return
// once its ctx ends; its ctx ends with ctx or after the tool's timeout,
// after which its result is not taken (the call is interrupted, and Call
// returns [ErrLate]).
//
// The answer is Done with the observation recorded (fn ran; Answer.Ran is
// set), Pending when the call waits for an operator (before it ran, or
// because it was interrupted), or Deny: fn did not run. The errors are
// Ask's and Report's; with Answer.Ran set, fn ran and its result may not
// be recorded.
func (r *Run) Call(ctx context.Context, tool string, args json.RawMessage, fn func(ctx context.Context, args json.RawMessage) (string, error)) (Answer, error) {
	stack.Grow()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calling.Store(true)
	defer r.calling.Store(false)
	if r.inflight != nil {
		return Answer{}, fmt.Errorf("call %s on run %s: %w (step %d)", tool, r.ID(), ErrUnreported, r.inflight.expect)
	}
	if err := ctx.Err(); err != nil {
		return Answer{}, fmt.Errorf("call %s on run %s: %w", tool, r.ID(), err)
	}
	defer r.watch()
	c, err := r.plan(ctx, tool, args)
	if err != nil {
		return Answer{}, err
	}
	c.fn, c.ctx = fn, ctx
	derr := r.drive(c)
	a, serr := r.settled(c, derr)
	if !c.ran {
		if err := ctx.Err(); err != nil && (serr == nil || errors.Is(serr, context.Canceled)) {
			return Answer{}, fmt.Errorf("call %s on run %s: %w", tool, r.ID(), err)
		}
		return a, serr
	}
	a.Ran = true
	switch {
	case c.timedOut():
		return a, fmt.Errorf("call %s, step %d on run %s: %w", tool, c.expect, r.ID(), ErrLate)
	case serr != nil:
		return Answer{Ran: true, Step: c.expect}, serr
	case a.Verdict == Deny:
		a.Verdict = Done
	}
	return a, nil
}

// plan sets up the call that asking tool with args is, on the run as it
// stands: as the log says it, after a failed drive, and with what came for
// another call's approval taken in.
func (r *Run) plan(ctx context.Context, tool string, args json.RawMessage) (c *call, err error) {
	if r.stale { // the name is built only then: a call's path allocates none
		if err := r.reload(ctx, "ask "+tool); err != nil {
			return nil, err
		}
	}
	r.r.Peek(func(v *projector.View) { c, err = r.planOn(v, tool, args) })
	if err != nil && r.waitsOnAnother(err) {
		// The run waits on another call, whose approval an operator may
		// have decided, or which may have expired: the answer is the run
		// as that makes it (ended, or waiting on a grant).
		if err := r.takeIn(ctx, "ask "+tool); err != nil {
			return nil, err
		}
		r.r.Peek(func(v *projector.View) { c, err = r.planOn(v, tool, args) })
	}
	if err != nil && errors.Is(err, ErrElsewhere) {
		// Said of the run as this process last read it: another process
		// may have settled that call since. Read on from there first.
		if err := r.g.d.Refresh(ctx, r.r); err != nil {
			return nil, fmt.Errorf("ask %s on run %s: read what others recorded: %w", tool, r.ID(), err)
		}
		r.r.Peek(func(v *projector.View) { c, err = r.planOn(v, tool, args) })
	}
	return c, err
}

// waitsOnAnother reports whether err, plan's, refuses a call because the
// run waits on another call's approval that is not granted: pending, or
// denied with the run's end not yet recorded (a drive cut short between
// the two). Apart from plan, whose every call would otherwise allocate the
// target errors.As needs.
func (r *Run) waitsOnAnother(err error) bool {
	var w *WaitingError
	return errors.As(err, &w) && w.Approval.State != projector.Granted
}

// reload reads the run again from the log after a failed drive; what
// names the caller in an error.
func (r *Run) reload(ctx context.Context, what string) error {
	if !r.stale {
		return nil
	}
	// A result this process holds but could not store is carried over
	// (the driver keeps it, see driver.Run.Keep); a decision the driver
	// kept to send again is not: it was the failed call's, not the next's.
	fresh, err := r.g.d.Reload(ctx, r.r)
	if err != nil {
		return fmt.Errorf("%s on run %s: read the run again after a failed call: %w", what, r.ID(), err)
	}
	own := fresh.OwnCallLast() // this process's event of that call ends the run, by its bytes
	if r.unran != 0 && own == r.unran {
		fresh.Keep(r.unran, events.ObsToolError, fmt.Sprintf(
			"not run: the record of this call could not be completed when it was made (the event log was unreachable), so it was not run; step %d", r.unran))
	}
	r.recoverNow = 0
	if r.over != 0 && own == r.over {
		r.recoverNow, r.recoverAt = r.over, fresh.Tail()
	}
	r.r, r.stale, r.unran, r.over = fresh, false, 0, 0
	return nil
}

// planOn is plan on the run's own view, which it must not change or keep.
func (r *Run) planOn(v *projector.View, tool string, args json.RawMessage) (*call, error) {
	if v.Run.Status.Ended() {
		return nil, &EndedError{Run: v.Run.ID, Status: v.Run.Status, Reason: v.Run.Reason, Detail: v.Run.Detail}
	}
	c := &call{tool: tool, stop: make(chan struct{})}
	// Only to compare with what the run recorded (a pending approval, an
	// allowed call): the driver checks the call against the schema itself.
	if canon, err := jsonform.PolicyJSON(args); err == nil {
		c.args = canon
	}
	same := func(t string, a []byte) bool { return c.args != nil && t == tool && bytes.Equal(a, c.args) }
	// The last step's summary copies nothing; the step itself is read only
	// when its call may be this one's recovery.
	last, _ := v.Summary(v.Steps.Len())
	if n, ok := r.r.Kept(); ok && n == last.N {
		// This process knows what became of the last call and records it
		// first (the drive does): the call asked now is a new step.
		last.Executing = false
	}
	// This process's own call, over here (see over), runs nowhere:
	// recovery settles it now.
	mine := last.N == r.recoverNow && r.r.Tail() == r.recoverAt
	if last.Executing && !mine {
		// A call allowed less than its tool's timeout ago may still be
		// running in another process that holds the run: recovering it now
		// would take a live call for an interrupted one.
		if until := v.Run.Updated.Add(recordedTimeout(v, last.Tool)); r.g.now().Before(until) {
			return nil, fmt.Errorf("ask %s on run %s: %w: step %d (%s) was allowed at %s and may still be running; ask again after %s",
				tool, v.Run.ID, ErrElsewhere, last.N, last.Tool, v.Run.Updated.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano))
		}
	}
	switch {
	case v.Run.Status == projector.Waiting:
		a := v.PendingApproval()
		if a == nil || !same(a.Tool, a.Args) {
			if a == nil {
				return nil, fmt.Errorf("ask %s on run %s: it waits with no open approval", tool, v.Run.ID)
			}
			return nil, &WaitingError{Run: v.Run.ID, Approval: copyApproval(a)}
		}
		c.expect = a.Step
	case last.Executing && same(last.Tool, v.Step(last.N).Policy.Args):
		// The call was allowed before this process restarted and its
		// result was never recorded: its recovery is this call.
		c.expect = last.N
	default:
		c.expect = v.Steps.Len() + 1
		c.dec = driver.Action{Tool: tool, Args: append(json.RawMessage(nil), args...)}
		c.fresh = true
	}
	return c, nil
}

// drive drives the run for c until the call's step is settled: the agent
// hands over c's decision once, and the drive stops once the call is
// handed over and its step settled (c.stop), or the next time the agent
// is asked (a step settled without running the call), before anything
// more is recorded.
func (r *Run) drive(c *call) error {
	// The proxy finds the call it runs in the context the driver hands
	// it, which it derives from this one.
	c.within = within{Context: r.life, c: c}
	err := r.g.d.DriveUntil(&c.within, r.r, c, c.stop)
	if errors.Is(err, driver.ErrStopped) {
		return nil // the call's step is settled
	}
	return err
}

// settled turns the end of c's drive into the answer about c.
func (r *Run) settled(c *call, err error) (Answer, error) {
	if errors.Is(err, events.ErrConflict) {
		return r.movedOn("ask "+c.tool, err)
	}
	if err != nil {
		r.stale = true
		switch {
		case !c.ran && !c.handed:
			// An allow of it (a decision, a grant's resume, a recovery)
			// may have been sent and stored, and nothing ran it.
			r.unran = c.expect
		case !c.timedOut():
			r.over = c.expect
		}
		return Answer{}, fmt.Errorf("ask %s on run %s: %w", c.tool, r.ID(), err)
	}
	var (
		a    Answer
		serr error
	)
	r.r.Peek(func(v *projector.View) { a, serr = r.settledOn(v, c) })
	return a, serr
}

// movedOn is the answer about what (a call, say) when another process
// moved the run on (err wraps [events.ErrConflict]): whatever it did is in
// the log; this one drops its view and reads it again. It is apart from settled, whose
// frame would otherwise hold a copy of a view (3 KB) on every call: a
// caller whose stack is small (an Ask's Report) would grow it for that.
func (r *Run) movedOn(what string, err error) (Answer, error) {
	fresh, lerr := r.g.d.Load(context.WithoutCancel(r.life), r.ID())
	if lerr == nil {
		r.r = fresh
		var end *EndedError
		fresh.Peek(func(v *projector.View) {
			if v.Run.Status.Ended() {
				// Ended by someone else (an operator's cancel, say): say so.
				end = &EndedError{Run: v.Run.ID, Status: v.Run.Status, Reason: v.Run.Reason, Detail: v.Run.Detail}
			}
		})
		if end != nil {
			return Answer{}, end
		}
	}
	return Answer{}, fmt.Errorf("%s on run %s: %w: %w", what, r.ID(), ErrElsewhere, err)
}

// settledOn is the answer about c on the run's own view, which it must not
// change or keep: what it hands out is copied.
func (r *Run) settledOn(v *projector.View, c *call) (Answer, error) {
	s, ok := v.Summary(c.expect)
	if a := v.PendingApproval(); v.Run.Status == projector.Waiting && a != nil {
		cp := copyApproval(a)
		if ok && a.Step == s.N {
			return Answer{Verdict: Pending, Step: s.N, Approval: &cp}, nil
		}
		return Answer{}, &WaitingError{Run: v.Run.ID, Approval: cp}
	}
	if ok && s.Observation != "" {
		return Answer{Verdict: Deny, Step: s.N, Observation: v.Observation(s.N), Ended: v.Run.Status.Ended()}, nil
	}
	if v.Run.Status.Ended() {
		// The run ended on this call without an observation for it: an
		// approval denied or expired, a limit, a policy abort.
		o := events.ObservedBody{Step: c.expect, Kind: events.ObsPolicyDenied, Content: endText(v)}
		return Answer{Verdict: Deny, Step: c.expect, Observation: &o, Ended: true}, nil
	}
	return Answer{}, fmt.Errorf("ask %s on run %s: step %d was not settled (run %s)", c.tool, r.ID(), c.expect, v.Run.Status)
}

// recordedTimeout is the timeout the run recorded for tool.
func recordedTimeout(v *projector.View, tool string) time.Duration {
	for _, t := range v.Run.Tools {
		if t.Name == tool {
			return time.Duration(t.TimeoutMS) * time.Millisecond
		}
	}
	return 0
}

func endText(v *projector.View) string {
	s := fmt.Sprintf("the run has ended (%s, %s)", v.Run.Status, v.Run.Reason)
	if v.Run.Detail != "" {
		s += ": " + v.Run.Detail
	}
	return s
}

// Report records the result of the allowed call: out when err is nil; a
// tool error when err is not; an interrupted call when err wraps
// [driver.ErrInterrupted] (its effect is unknown: the driver recovers it).
// It returns [Done] with the observation recorded, or [Pending] when an
// interrupted call now waits for an operator. [ErrNoCall] when nothing was
// allowed, [ErrLate] after the tool's timeout (the call was taken as
// interrupted, and the result is not recorded).
func (r *Run) Report(_ context.Context, out string, err error) (Answer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.inflight
	if c == nil {
		return Answer{}, fmt.Errorf("report on run %s: %w", r.ID(), ErrNoCall)
	}
	r.inflight = nil
	defer r.watch() // an interrupted call may now wait on an approval
	var late bool
	select {
	case c.result <- report{out: out, err: err}:
	case <-c.late:
		late = true
	}
	derr := <-c.done
	a, serr := r.settled(c, derr)
	if late {
		return a, fmt.Errorf("report step %d on run %s: %w", c.expect, r.ID(), ErrLate)
	}
	if serr != nil {
		return Answer{}, serr
	}
	if a.Verdict == Deny {
		a.Verdict = Done
	}
	return a, nil
}
