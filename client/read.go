package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// ErrBroken marks a run whose events do not verify or do not fold: no
// worker drives it, and nothing of it executes.
var ErrBroken = errors.New("run is BROKEN: its events do not verify or fold, so no worker drives it and nothing of it executes")

// ErrNoRun is returned for a run that has no events: events.ErrNoRun.
var ErrNoRun = events.ErrNoRun

// Read reads every event of run and folds them. A run whose stored events
// are not one hash chain ending at the log's last message for it, or that
// do not fold, is an error wrapping [ErrBroken] (the records read are
// returned with a fold error, so a reader can show what is stored); a run
// with no events is [ErrNoRun].
func (c *Client) Read(ctx context.Context, run string) (projector.View, []events.Record, error) {
	v, recs, _, err := c.read(ctx, run)
	return v, recs, err
}

func (c *Client) read(ctx context.Context, run string) (projector.View, []events.Record, events.Tail, error) {
	if err := events.ValidRunID(run); err != nil {
		return projector.View{}, nil, events.Tail{}, fmt.Errorf("read run: %w", err)
	}
	recs, tail, err := c.log.Read(ctx, run)
	switch {
	case errors.Is(err, events.ErrBrokenChain) || errors.Is(err, events.ErrMalformed):
		return projector.View{}, nil, events.Tail{}, fmt.Errorf("run %s: %w: %w", run, ErrBroken, err)
	case err != nil:
		return projector.View{}, nil, events.Tail{}, fmt.Errorf("read run %s: %w", run, err)
	}
	evs := make([]events.Event, len(recs))
	for i, r := range recs {
		evs[i] = r.Event
	}
	v, err := projector.Fold(evs...)
	if err != nil {
		return projector.View{}, recs, events.Tail{}, fmt.Errorf("run %s: %w: %w", run, ErrBroken, err)
	}
	return v, recs, tail, nil
}

// View returns run's view: its row, steps and approvals. Errors as
// [Client.Read].
func (c *Client) View(ctx context.Context, run string) (projector.View, error) {
	v, _, err := c.Read(ctx, run)
	return v, err
}

// Events returns run's events, their hash chain verified to the log's last
// message for the run. Errors as [Client.Read], except that events that
// verify but do not fold are returned (with the error).
func (c *Client) Events(ctx context.Context, run string) ([]events.Record, error) {
	_, recs, err := c.Read(ctx, run)
	return recs, err
}

// Follow calls fn for each event of run stored after from (the zero Tail:
// from the first), as they are stored, until the run ends (fn has seen its
// end event), ctx is done (nil is returned) or fn returns an error. Every
// read is verified as [events.Log.Since] verifies it.
func (c *Client) Follow(ctx context.Context, run string, from events.Tail, fn func(events.Record) error) error {
	for {
		recs, tail, err := c.log.Since(ctx, run, from)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, events.ErrBrokenChain) || errors.Is(err, events.ErrMalformed) {
			return fmt.Errorf("run %s: %w: %w", run, ErrBroken, err)
		}
		if err != nil && !(errors.Is(err, events.ErrNoRun) && from.Count == 0) {
			return fmt.Errorf("follow run %s: %w", run, err)
		}
		for _, r := range recs {
			if err := fn(r); err != nil {
				return err
			}
			if r.Event.Kind.Terminal() {
				return nil
			}
		}
		if err == nil {
			from = tail
		}
		if pause(ctx, c.poll) != nil {
			return nil
		}
	}
}
