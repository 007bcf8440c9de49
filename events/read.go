package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoRun is returned when a run has no events.
var ErrNoRun = errors.New("no such run")

// Read returns every event of run, in order, and its tail. It asks the
// server for exactly the run's event count (from its last event), so it never
// scans past the run, and it verifies the hash chain as it goes: an altered or
// missing event is an error wrapping [ErrBrokenChain].
func (l *Log) Read(ctx context.Context, run string) ([]Record, Tail, error) {
	return l.Since(ctx, run, Tail{})
}

// Since returns the events of run after the position from, and the run's
// tail: what a holder of a view at from needs to bring it up to date. When
// only one event was appended since, the lookup of the tail has already
// returned it, and no second read is made.
func (l *Log) Since(ctx context.Context, run string, from Tail) ([]Record, Tail, error) {
	m, err := l.last(ctx, run)
	if err != nil {
		return nil, Tail{}, fmt.Errorf("read run %s: %w", run, err)
	}
	if m == nil {
		return nil, Tail{}, fmt.Errorf("read run %s: %w", run, ErrNoRun)
	}
	e, err := Decode(m.Data)
	if err != nil {
		return nil, Tail{}, fmt.Errorf("read run %s at stream seq %d: %w", run, m.Sequence, err)
	}
	if err := l.CheckSubject(m.Subject, e); err != nil {
		return nil, Tail{}, fmt.Errorf("read run %s: %w", run, err)
	}
	tail := Tail{Seq: m.Sequence, Count: e.Seq, Hash: Hash(m.Data)}
	switch {
	case tail == from:
		return nil, tail, nil
	case e.Seq == from.Count+1:
		rec, err := l.chained(run, l.StreamName(l.Shard(run)), m, e.Seq, from.Hash)
		if err != nil {
			return nil, Tail{}, err
		}
		return []Record{rec}, tail, nil
	}
	recs, err := l.ReadAfter(ctx, run, from, tail)
	return recs, tail, err
}

// maxBatch bounds one batch read (see [Log.GetBatch]): a long run is read
// in several, each with a reply channel of its size.
const maxBatch = 1024

// ReadAfter returns the events of run after the position from, up to and
// including the position to (as returned by [Log.Tail]). The first event read
// must chain onto from.Hash. A view snapshot at from plus these events is the
// run at to.
func (l *Log) ReadAfter(ctx context.Context, run string, from, to Tail) ([]Record, error) {
	if to.Count < from.Count {
		return nil, fmt.Errorf("read run %s: tail %d is before snapshot %d", run, to.Count, from.Count)
	}
	want := int(to.Count - from.Count)
	if want == 0 {
		return nil, nil
	}
	stream := l.StreamName(l.Shard(run))
	out := make([]Record, 0, want)
	next, prev := from.Seq+1, from.Hash
	for len(out) < want {
		msgs, err := l.GetBatch(ctx, stream, next, want-len(out), l.RunFilter(run))
		if err != nil {
			return nil, fmt.Errorf("read run %s: %w", run, err)
		}
		got := 0
		for _, m := range msgs {
			rec, err := l.chained(run, stream, m, from.Count+uint64(len(out))+1, prev)
			if err != nil {
				return nil, err
			}
			out = append(out, rec)
			prev, next = Hash(m.Data), m.Sequence+1
			got++
			if len(out) == want {
				break
			}
		}
		if got == 0 {
			return nil, fmt.Errorf("read run %s: %w: %d events missing after position %d", run, ErrBrokenChain, want-len(out), from.Count+uint64(len(out)))
		}
	}
	return out, nil
}

func (l *Log) chained(run, stream string, m *jetstream.RawStreamMsg, seq uint64, prev string) (Record, error) {
	e, err := Decode(m.Data)
	if err != nil {
		return Record{}, fmt.Errorf("read run %s at stream seq %d: %w", run, m.Sequence, err)
	}
	if err := l.CheckSubject(m.Subject, e); err != nil {
		return Record{}, fmt.Errorf("read run %s: %w", run, &ChainError{Index: int(seq - 1), Seq: e.Seq, EventID: e.ID, Reason: err.Error()})
	}
	if e.Run != run || e.Seq != seq || e.Prev != prev {
		return Record{}, fmt.Errorf("read run %s: %w", run, &ChainError{
			Index: int(seq - 1), Seq: e.Seq, EventID: e.ID,
			Reason: fmt.Sprintf("want position %d chained on %q, got run %q position %d chained on %q", seq, prev, e.Run, e.Seq, e.Prev),
		})
	}
	return Record{Event: e, Data: m.Data, Stream: stream, StreamSeq: m.Sequence}, nil
}

// RawRecord is a stored message as read by [Log.Scan], not yet decoded: a
// reader that must survive a malformed event (an audit) decodes it itself.
type RawRecord struct {
	Data      []byte
	Subject   string
	Stream    string
	StreamSeq uint64
}

// Scan calls fn for every message of shard k's stream from stream sequence
// from (1 for the start) up to the last message stored when Scan began, in
// order. It stops at the first error fn returns and returns it. Scan reads
// through an ordered consumer, so it costs one pass over the stream.
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
	return l.consume(ctx, k, from, func(r RawRecord) (bool, error) {
		if err := fn(r); err != nil {
			return false, err
		}
		return r.StreamSeq < end, nil
	})
}

// Follow calls fn for every message of shard k's stream from stream sequence
// from on, and keeps waiting for new ones until ctx is done or fn returns an
// error. It is what projectors and summaries are built on.
func (l *Log) Follow(ctx context.Context, k int, from uint64, fn func(RawRecord) error) error {
	if from == 0 {
		from = 1
	}
	err := l.consume(ctx, k, from, func(r RawRecord) (bool, error) { return true, fn(r) })
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (l *Log) consume(ctx context.Context, k int, from uint64, fn func(RawRecord) (more bool, err error)) error {
	stream := l.StreamName(k)
	c, err := l.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   from,
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	it, err := c.Messages(jetstream.PullMaxMessages(1024))
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	defer it.Stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			it.Stop()
		case <-done:
		}
	}()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read %s: %w", stream, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("read %s: %w", stream, err)
		}
		more, err := fn(RawRecord{Data: m.Data(), Subject: m.Subject(), Stream: stream, StreamSeq: md.Sequence.Stream})
		if err != nil || !more {
			return err
		}
	}
}
