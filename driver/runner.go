package driver

import (
	"context"
	"fmt"
)

// runner runs the tool calls of one drive on one goroutine, kept for the
// drive, instead of a goroutine started for each call: no start, no
// channel and closure made for each call, and a stack already grown to
// what the tools' code needs (a tool's client code runs deep, and a new
// goroutine grows its stack again from the smallest size, copying it at
// each doubling). A call that overruns its context is left behind on the
// runner, as [aside] leaves its goroutine; that runner then takes no more
// calls, and ends once the call returns.
type runner struct {
	jobs chan job
	done chan outcome[string] // buffered: one nobody waits for any more is dropped there
	quit chan struct{}
}

type job struct {
	ctx  context.Context
	what string
	fn   func(context.Context) (string, error)
}

func newRunner() *runner {
	r := &runner{jobs: make(chan job), done: make(chan outcome[string], 1), quit: make(chan struct{})}
	go r.loop()
	return r
}

func (r *runner) loop() {
	for {
		select {
		case j := <-r.jobs:
			r.done <- caught(j.ctx, j.what, j.fn)
		case <-r.quit:
			return
		}
	}
}

// stop ends the runner once it is idle (or, if a call overran on it, once
// that call returns). It takes no calls after.
func (r *runner) stop() { close(r.quit) }

// call runs fn on the runner and waits for it, or for ctx to end, calling
// the busy hook meanwhile, exactly as [aside] does; kept is false when ctx
// ended first, and the runner, left with the call, must not be used again.
func (r *runner) call(ctx context.Context, what string, fn func(context.Context) (string, error)) (v string, kept bool, err error) {
	select {
	case r.jobs <- job{ctx, what, fn}:
	case <-ctx.Done():
		return "", false, fmt.Errorf("%s %w: %w", what, errOverran, ctx.Err())
	}
	return await(ctx, what, r.done)
}
