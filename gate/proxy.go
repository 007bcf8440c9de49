package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/arbiter-run/arbiter/driver"
)

// proxy is a gate tool as the driver sees it: executing it hands the allow
// to the program's Ask and waits for the program's Report.
type proxy struct {
	spec driver.Spec   // as registered: the timeout is wait plus a second
	wait time.Duration // how long a result may take to be reported
}

// newProxy registers s with a timeout a second longer than s.Timeout, so
// that it is the proxy's own wait, not the driver's deadline, that ends a
// call never reported: the driver takes that as an interrupted call, not
// as a timeout the model may simply retry (as the mcp adapter does).
func newProxy(s driver.Spec) *proxy {
	p := &proxy{spec: s, wait: s.Timeout}
	if s.Timeout > 0 {
		p.spec.Timeout += time.Second
	}
	return p
}

var (
	_ driver.Tool   = (*proxy)(nil)
	_ driver.Inline = (*proxy)(nil)
)

func (p *proxy) Spec() driver.Spec { return p.spec }

// Inline is true: Execute returns once its ctx ends (it waits on channels
// and its own timer, or runs a [Run.Call]'s function, which must), so the
// driver runs it on the drive's goroutine, with no hand-off.
func (p *proxy) Inline() bool { return true }

// Execute hands the allowed call to the Ask waiting for it and returns what
// the program reports, or runs a [Run.Call]'s function with it. A call
// nobody waits for (the rerun of a read-only call interrupted before a
// restart, asked for by nobody now) and a result not reported in time are
// interrupted calls: the driver recovers them as it recovers a crash (a
// read-only call is tried once more, any other waits for an operator).
// Once the call is handed over, the drive stops after the step it settles
// (see call.stop).
func (p *proxy) Execute(ctx context.Context, args json.RawMessage) (string, error) {
	at, _ := driver.CallOf(ctx)
	c := callOf(ctx)
	if c == nil || !c.wants(p.spec.Name, args, at.Step) || c.timedOut() || c.handed {
		// Nobody waits for this allow: after a timeout, or once the call
		// was handed to an Ask (whose program reported it interrupted),
		// the rerun of a read-only call is not handed to a program that
		// has moved on.
		return "", fmt.Errorf("%w: no program waits to run step %d (%s)", driver.ErrInterrupted, at.Step, p.spec.Name)
	}
	defer c.finish()
	if c.fn != nil {
		return p.call(ctx, c, at.Step, args)
	}
	select {
	case c.allowed <- allowed{step: at.Step, args: append([]byte(nil), args...)}:
		c.handed = true
	case <-c.abandoned:
		// The allow never reached the program, so the call did not run.
		return "", fmt.Errorf("not run: the program stopped asking for step %d (%s) before it was allowed", at.Step, p.spec.Name)
	case <-ctx.Done():
		return "", fmt.Errorf("%w: %w", driver.ErrInterrupted, ctx.Err())
	}
	t := time.NewTimer(p.wait)
	defer t.Stop()
	select {
	case rep := <-c.result:
		return rep.out, rep.err
	case <-t.C:
	case <-ctx.Done():
	}
	c.expire()
	return "", fmt.Errorf("%w: no result reported for step %d (%s) within %s", driver.ErrInterrupted, at.Step, p.spec.Name, p.wait)
}

// call runs c's function with the allowed arguments, here (on the drive's
// goroutine, which is the caller's), under the tool's wait and the
// caller's context. A result that comes after the wait is not taken: the
// call is interrupted, as a result reported late is.
func (p *proxy) call(ctx context.Context, c *call, step int, args json.RawMessage) (string, error) {
	if err := c.ctx.Err(); err != nil {
		// The caller gave up before the allow was stored: the call did
		// not run.
		return "", fmt.Errorf("not run: the program stopped asking for step %d (%s) before it was allowed: %w", step, p.spec.Name, err)
	}
	fctx, cancel := context.WithTimeout(ctx, p.wait)
	defer cancel()
	if c.ctx.Done() != nil {
		// fn's context ends with the caller's too (one that can never
		// end, context.Background, needs no link).
		defer context.AfterFunc(c.ctx, cancel)()
	}
	c.ran = true
	out, err := c.fn(fctx, args)
	if fctx.Err() != nil && c.ctx.Err() == nil && ctx.Err() == nil {
		c.expire()
		return "", fmt.Errorf("%w: no result for step %d (%s) within %s", driver.ErrInterrupted, step, p.spec.Name, p.wait)
	}
	return out, err
}

// call is one Ask or Call in progress, and its allowed call until it is
// reported.
type call struct {
	tool   string
	args   []byte // PolicyJSON, nil when the arguments are not usable JSON
	expect int    // the step the call is
	// dec is the decision to hand the driver when fresh (a new step, not
	// a pending one asked again or a recovery). call is the drive's agent
	// (see DecideStep).
	dec   driver.Action
	fresh bool
	// within is the drive's context, carrying the call to the proxy.
	within within

	// fn and ctx, for a [Run.Call]: the function that runs the call and
	// the caller's context. ran is set once fn is called (on the drive's
	// goroutine, which is then the caller's).
	fn  func(ctx context.Context, args json.RawMessage) (string, error)
	ctx context.Context
	ran bool

	// stop is closed once the call is handed over (its result is in, or
	// it timed out): the drive stops as soon as the step is settled,
	// without asking the agent for the next decision.
	stop     chan struct{}
	stopOnce sync.Once

	// allowed, result, late, abandoned and done are an Ask's (nil for a
	// Call).
	allowed   chan allowed
	result    chan report
	late      chan struct{} // closed by the proxy when its wait timed out
	abandoned chan struct{} // closed when the Ask gave up before the allow
	done      chan error    // the drive's end

	// Set on the drive's goroutine only (for a Call, the caller's), and
	// read there or after the drive's end.
	decided bool // the agent handed dec to the driver
	handed  bool // the proxy handed the allow to the Ask
	expired bool // the proxy's wait for the result timed out
}

var _ driver.Stepper = (*call)(nil)

// DecideStep is the drive's agent: it hands over c's decision once, for
// the step it is, and has none the next time it is asked (the step is
// settled then): the drive stops there, before anything more is recorded.
// It reads nothing of the run but the step number, so the driver copies
// nothing of the view for it.
func (c *call) DecideStep(_ context.Context, n int) (driver.Action, bool) {
	if c.fresh && !c.decided && n == c.expect {
		c.decided = true
		return c.dec, true
	}
	return driver.Action{}, false
}

// Decide is DecideStep for a driver that asks with the run's view.
func (c *call) Decide(ctx context.Context, in driver.StepInput) (driver.Action, error) {
	if dec, ok := c.DecideStep(ctx, in.Steps.Len()+1); ok {
		return dec, nil
	}
	return driver.Action{}, fmt.Errorf("gate: no decision for step %d (call %s is step %d)", in.Steps.Len()+1, c.tool, c.expect)
}

type allowed struct {
	step int
	args []byte
}

type report struct {
	out string
	err error
}

// within is a drive's context: the drive of call c.
type within struct {
	context.Context
	c *call
}

type callKey struct{}

// Value answers callKey with the call; anything else is the drive's
// context's. The context it embeds stays the driver's parent: a context
// derived from within is canceled with it at no cost of its own.
func (w *within) Value(key any) any {
	if _, ok := key.(callKey); ok {
		return w.c
	}
	return w.Context.Value(key)
}

// callOf returns the call whose drive ctx is in, or nil: a drive that is
// not a gate call's (the driver used directly) has no program waiting.
func callOf(ctx context.Context) *call {
	c, _ := ctx.Value(callKey{}).(*call)
	return c
}

func (c *call) finish() { c.stopOnce.Do(func() { close(c.stop) }) }

// expire marks the call timed out: its result, when it comes, is not
// taken.
func (c *call) expire() {
	c.expired = true
	if c.late != nil {
		close(c.late) // the Report waiting to hand over a result gives up
	}
}

func (c *call) timedOut() bool { return c.expired }

func (c *call) wants(tool string, args []byte, step int) bool {
	return c.args != nil && tool == c.tool && step == c.expect && bytes.Equal(args, c.args)
}
