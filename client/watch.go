package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
)

// WatchApprovals calls fn for every approval event of every run, in order
// per shard, until ctx is done or fn returns an error: [approvals.Watch],
// durable when state names a file.
func (c *Client) WatchApprovals(ctx context.Context, state string, fn func(approvals.Notice) error) error {
	return approvals.Watch(ctx, c.log, state, fn)
}

// End is a run's end as [Client.WatchEnds] sees it.
type End struct {
	// Run is the run's id; Kind run.finished, run.failed or run.cancelled.
	Run  string
	Kind events.Kind
	// Body says why, and for a completed run its result.
	Body events.EndBody
	// Event is the end event as stored.
	Event events.Event
	// Err is set when the stored message cannot be trusted (it does not
	// decode, or is stored on a subject its kind does not belong on):
	// report it, never act on it.
	Err error
}

// WatchEnds calls fn for every run that ends, in order per shard, until
// ctx is done (nil is returned) or fn returns an error. With fromStart it
// begins with the first run the log holds; without, with those that end
// after the call. Like [approvals.Watch] it reads with batch direct gets
// and asks again every poll once caught up: no consumer is needed.
func (c *Client) WatchEnds(ctx context.Context, fromStart bool, fn func(End) error) error {
	shards := c.log.Config().Shards
	errc := make(chan error, shards)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for k := 0; k < shards; k++ {
		go func() { errc <- c.watchEnds(ctx, k, fromStart, fn) }()
	}
	var first error
	for range shards {
		if err := <-errc; err != nil && first == nil && !errors.Is(err, context.Canceled) {
			first = err
			cancel()
		}
	}
	return first
}

func (c *Client) watchEnds(ctx context.Context, k int, fromStart bool, fn func(End) error) error {
	stream := c.log.StreamName(k)
	next := uint64(1)
	if !fromStart {
		s, err := c.log.JetStream().Stream(ctx, stream)
		if err != nil {
			return fmt.Errorf("watch ends on %s: %w", stream, err)
		}
		next = s.CachedInfo().State.LastSeq + 1
	}
	// Every run.* kind: the ends, and run.created and run.tools, skipped.
	filter := strings.TrimSuffix(c.log.KindFilter(k, events.RunCreated), "created") + "*"
	for {
		msgs, err := jsinbox.GetBatch(ctx, c.log.JetStream(), stream, next, jsinbox.MaxBatch, filter)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("watch ends on %s from %d: %w", stream, next, err)
		}
		for _, m := range msgs {
			next = m.Sequence + 1
			ev, err := events.Decode(m.Data)
			if err == nil {
				err = c.log.CheckStored(m.Subject, m.Header, ev)
			}
			if err == nil && !ev.Kind.Terminal() {
				continue
			}
			e := End{Run: ev.Run, Kind: ev.Kind, Event: ev, Err: err}
			if err == nil {
				e.Body, e.Err = events.DecodeBody[events.EndBody](ev)
			}
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(msgs) == 0 && pause(ctx, c.poll) != nil {
			return nil
		}
	}
}
