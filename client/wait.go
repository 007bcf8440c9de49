package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// Errors [Client.Result] and [Client.Wait] return beside the run's row.
var (
	// ErrNotEnded: the run has not ended yet.
	ErrNotEnded = errors.New("run has not ended")
	// ErrNoAnswer: the run ended without completing (failed or
	// cancelled); the row says why.
	ErrNoAnswer = errors.New("run ended without an answer")
)

// Result returns run's row as it stands: with no error when it completed
// (its Result is the answer), with an error wrapping [ErrNoAnswer] when
// it ended otherwise (Status, Reason and Detail say how), and wrapping
// [ErrNotEnded] while it goes on. Errors of reading as [Client.Read].
func (c *Client) Result(ctx context.Context, run string) (projector.Run, error) {
	v, err := c.View(ctx, run)
	if err != nil {
		return projector.Run{}, err
	}
	return v.Run, outcome(v.Run)
}

// Wait waits until run ends, wherever it is driven, and returns its row as
// [Client.Result] does. It reads the run once, then only what is stored
// after what it has read, every poll (Config.Poll), verifying each read.
// A run with no events yet is waited for too (a start being recorded).
// When ctx ends first, the error wraps ctx's and the row is the last read.
func (c *Client) Wait(ctx context.Context, run string) (projector.Run, error) {
	if err := events.ValidRunID(run); err != nil {
		return projector.Run{}, fmt.Errorf("wait: %w", err)
	}
	var v projector.View
	var tail events.Tail
	for {
		recs, t, err := c.log.Since(ctx, run, tail)
		switch {
		case errors.Is(err, events.ErrNoRun) && tail.Count == 0:
		case errors.Is(err, events.ErrBrokenChain) || errors.Is(err, events.ErrMalformed):
			return v.Run, fmt.Errorf("run %s: %w: %w", run, ErrBroken, err)
		case err != nil && ctx.Err() == nil:
			return v.Run, fmt.Errorf("wait for run %s: %w", run, err)
		case err == nil:
			for _, r := range recs {
				if ferr := v.Apply(r.Event); ferr != nil {
					return v.Run, fmt.Errorf("run %s: %w: %w", run, ErrBroken, ferr)
				}
			}
			tail = t
			if v.Run.Status.Ended() {
				return v.Run, outcome(v.Run)
			}
		}
		if err := pause(ctx, c.poll); err != nil {
			return v.Run, fmt.Errorf("wait for run %s: it is %s after %d steps: %w", run, v.Run.Status, v.Run.Steps, err)
		}
	}
}

func outcome(r projector.Run) error {
	switch {
	case r.Status == projector.Completed:
		return nil
	case r.Status.Ended():
		return fmt.Errorf("run %s %s %s: %s: %w", r.ID, r.Status, r.Reason, r.Detail, ErrNoAnswer)
	}
	return fmt.Errorf("run %s is %s after %d steps: %w", r.ID, r.Status, r.Steps, ErrNotEnded)
}
