package events

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Scan and Follow read a whole shard with batch direct gets, never a
// consumer: a reader needs no consumer API on the server, so an operator's
// NATS user is given none and cannot create, rewrite, delete or drain anyone
// else's (ADR 0008).

// FollowPoll is how long Follow waits before asking again once it has read
// everything stored.
const FollowPoll = 200 * time.Millisecond

// A scan that is served less than the stream said it holds asks again every
// lagRetry, at most maxLagRetries times.
const (
	lagRetry      = 20 * time.Millisecond
	maxLagRetries = 100
)

// RawRecord is a stored message as read by [Log.Scan], not yet decoded: a
// reader that must survive a malformed event (an audit) decodes it itself.
type RawRecord struct {
	Data      []byte
	Subject   string
	Header    nats.Header // as the server served it (see [Log.CheckStored])
	Stream    string
	StreamSeq uint64
}

// Scan calls fn for every message of shard k's stream from stream sequence
// from (1 for the start) up to the last message stored when Scan began, in
// order. It stops at the first error fn returns and returns it. Scan reads
// in batch direct gets of up to 1,024 messages, one pass over the stream.
func (l *Log) Scan(ctx context.Context, k int, from uint64, fn func(RawRecord) error) error {
	stream := l.StreamName(k)
	s, err := l.js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("scan %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("scan %s: %w", stream, err)
	}
	end := info.State.LastSeq
	if from == 0 {
		from = 1
	}
	if end < from || info.State.Msgs == 0 {
		return nil
	}
	return l.consume(ctx, k, from, end, func(r RawRecord) (bool, error) {
		if err := fn(r); err != nil {
			return false, err
		}
		return r.StreamSeq < end, nil
	})
}

// Follow calls fn for every message of shard k's stream from stream sequence
// from on, and keeps waiting for new ones (asking again every [FollowPoll]
// once caught up) until ctx is done or fn returns an error. It is what
// projectors and summaries are built on.
func (l *Log) Follow(ctx context.Context, k int, from uint64, fn func(RawRecord) error) error {
	if from == 0 {
		from = 1
	}
	err := l.consume(ctx, k, from, 0, func(r RawRecord) (bool, error) { return true, fn(r) })
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// consume hands fn the messages of shard k from stream sequence from on, in
// order, until fn says no more or returns an error. With end > 0 it stops
// once it has read everything up to end, and fails if that is not served
// within about two seconds; with end 0 it waits for more. While fn works through one
// batch the next is already asked for, so a long scan does not wait a round
// trip between batches.
func (l *Log) consume(ctx context.Context, k int, from, end uint64, fn func(RawRecord) (more bool, err error)) error {
	stream := l.StreamName(k)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends a prefetch nobody will read
	type batch struct {
		msgs []*jetstream.RawStreamMsg
		err  error
	}
	fetch := func(seq uint64) <-chan batch {
		ch := make(chan batch, 1)
		go func() {
			msgs, err := l.getBatch(ctx, stream, seq, maxBatch, "")
			ch <- batch{msgs, err}
		}()
		return ch
	}
	next, lagged := from, 0
	pending := fetch(next)
	for {
		b := <-pending
		if b.err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read %s from %d: %w", stream, next, b.err)
		}
		if len(b.msgs) == 0 {
			wait := FollowPoll
			if end > 0 {
				if next > end {
					return nil
				}
				// The stream said it held up to end. A replica answering
				// direct gets may lag the leader: give it time, bounded.
				if lagged++; lagged > maxLagRetries {
					return fmt.Errorf("read %s: messages %d to %d not served after %s (a replica behind?)", stream, next, end, time.Duration(maxLagRetries)*lagRetry)
				}
				wait = lagRetry
			}
			if err := pause(ctx, wait); err != nil {
				return err
			}
			pending = fetch(next)
			continue
		}
		lagged = 0
		next = b.msgs[len(b.msgs)-1].Sequence + 1
		pending = fetch(next)
		for _, m := range b.msgs {
			more, err := fn(RawRecord{Data: m.Data, Subject: m.Subject, Header: m.Header, Stream: stream, StreamSeq: m.Sequence})
			if err != nil || !more {
				return err
			}
		}
	}
}

// pause waits d, or less when ctx ends first (then it returns ctx's error).
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
