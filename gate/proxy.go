package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/driver"
)

// proxy is a gate tool as the driver sees it: executing it hands the allow
// to the program's Ask and waits for the program's Report.
type proxy struct {
	g    *Gate
	spec driver.Spec   // as registered: the timeout is wait plus a second
	wait time.Duration // how long a result may take to be reported
}

// newProxy registers s with a timeout a second longer than s.Timeout, so
// that it is the proxy's own wait, not the driver's deadline, that ends a
// call never reported: the driver takes that as an interrupted call, not
// as a timeout the model may simply retry (as the mcp adapter does).
func newProxy(g *Gate, s driver.Spec) *proxy {
	p := &proxy{g: g, spec: s, wait: s.Timeout}
	if s.Timeout > 0 {
		p.spec.Timeout += time.Second
	}
	return p
}

var _ driver.Tool = (*proxy)(nil)

func (p *proxy) Spec() driver.Spec { return p.spec }

// Execute hands the allowed call to the Ask waiting for it and returns what
// the program reports. A call no Ask waits for (the rerun of a read-only
// call interrupted before a restart, asked for by nobody now) and a result
// not reported before ctx ends are interrupted calls: the driver recovers
// them as it recovers a crash (a read-only call is tried once more, any
// other waits for an operator).
func (p *proxy) Execute(ctx context.Context, args json.RawMessage) (string, error) {
	at, _ := driver.CallOf(ctx)
	c := p.g.current(at.Run)
	if c == nil || !c.wants(p.spec.Name, args, at.Step) || c.timedOut() {
		// Nobody waits for this allow (after a timeout, the rerun of a
		// read-only call is not handed to a program that has moved on).
		return "", fmt.Errorf("%w: no program waits to run step %d (%s)", driver.ErrInterrupted, at.Step, p.spec.Name)
	}
	select {
	case c.allowed <- allowed{step: at.Step, args: append([]byte(nil), args...)}:
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
	close(c.late)
	return "", fmt.Errorf("%w: no result reported for step %d (%s) within %s", driver.ErrInterrupted, at.Step, p.spec.Name, p.wait)
}

// call is one Ask in progress, and its allowed call until it is reported.
type call struct {
	tool   string
	args   []byte // PolicyJSON, nil when the arguments do not check
	expect int    // the step the call is
	dec    *driver.Decision

	allowed   chan allowed
	result    chan report
	late      chan struct{} // closed by the proxy when its wait timed out
	abandoned chan struct{} // closed when the Ask gave up before the allow
	decided   bool          // the agent handed dec to the driver (drive goroutine only)
	done      chan error    // the drive's end
}

type allowed struct {
	step int
	args []byte
}

type report struct {
	out string
	err error
}

func (c *call) timedOut() bool {
	select {
	case <-c.late:
		return true
	default:
		return false
	}
}

func (c *call) wants(tool string, args []byte, step int) bool {
	return c.args != nil && tool == c.tool && step == c.expect && bytes.Equal(args, c.args)
}
