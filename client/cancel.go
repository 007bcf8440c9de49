package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
)

// ErrEnded marks a run that has ended when the call needs one that has
// not (cancelling it, waiting for its approval).
var ErrEnded = errors.New("run has ended")

// Cancel ends run as cancelled with reason: one append of run.cancelled,
// fenced on the run's tail. A worker that drives the run notices at once
// (it watches for the cancellation while it drives) and executes nothing
// more for it. When a worker moves the run between the read and the
// append, Cancel reads it again and tries again, at most five times.
//
// It needs a NATS user that may write run subjects (the worker user).
// Errors: a run that has ended wraps [ErrEnded]; errors of reading as
// [Client.Read].
func (c *Client) Cancel(ctx context.Context, run, reason string) error {
	var err error
	for try := 0; try < 5; try++ {
		v, _, tail, rerr := c.read(ctx, run)
		if rerr != nil {
			return fmt.Errorf("cancel: %w", rerr)
		}
		if v.Run.Status.Ended() {
			return fmt.Errorf("cancel run %s: %w %s", run, ErrEnded, v.Run.Status)
		}
		ev, nerr := events.New(run, events.RunCancelled, events.EndBody{Reason: events.ReasonCancelled, Detail: reason})
		if nerr != nil {
			return fmt.Errorf("cancel run %s: %w", run, nerr)
		}
		if _, err = c.log.Append(ctx, tail, ev); !errors.Is(err, events.ErrConflict) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("cancel run %s: %w", run, err)
	}
	return nil
}
