package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNoRun is returned when a run has no events.
var ErrNoRun = errors.New("no such run")

// Read returns every event of run, in order, and its tail. See
// [Log.Since].
func (l *Log) Read(ctx context.Context, run string) ([]Record, Tail, error) {
	return l.Since(ctx, run, Tail{})
}

// Since returns the events of run after the position from, and the run's
// tail: what a holder of a view at from needs to bring it up to date.
//
// A read is believed only whole. It reads every message stored on the run's
// subjects from from on, to the end of the stream as the server counts it,
// and each must be the next event of the run: on its own subject, at the
// next position, chained on the hash of the one before. So the tail it
// returns is the run's last stored message itself (its stream sequence and
// hash), never a position some message claims; a second message claiming a
// position already read, a message on the run's subjects that is no event
// of it, or a gap is an error wrapping [ErrBrokenChain], and nothing of the
// run is returned. A non-zero from must name a message the log holds (its
// stream sequence, position and hash): a snapshot's tail that the log does
// not have is refused the same way.
func (l *Log) Since(ctx context.Context, run string, from Tail) ([]Record, Tail, error) {
	if err := ValidRunID(run); err != nil {
		return nil, Tail{}, err
	}
	stream, filter := l.StreamName(l.Shard(run)), l.RunFilter(run)
	next, tail := uint64(1), from
	anchored := from.Count == 0 // the first message read must be from's own, unless from is the start
	if !anchored {
		next = from.Seq
	}
	var out []Record
	for {
		msgs, more, err := l.getBatch(ctx, stream, next, maxBatch, filter)
		if err != nil {
			return nil, Tail{}, fmt.Errorf("read run %s: %w", run, err)
		}
		for _, m := range msgs {
			if !anchored {
				if m.Sequence != from.Seq || Hash(m.Data) != from.Hash {
					return nil, Tail{}, fmt.Errorf("read run %s: %w: position %d (stream seq %d, hash %.12s) is not in the log", run, ErrBrokenChain, from.Count, from.Seq, from.Hash)
				}
				e, err := Decode(m.Data)
				if err != nil || e.Run != run || e.Seq != from.Count {
					return nil, Tail{}, fmt.Errorf("read run %s: %w: stream seq %d is not position %d of the run", run, ErrBrokenChain, from.Seq, from.Count)
				}
				anchored = true
				continue
			}
			rec, err := l.chained(run, stream, m, tail.Count+1, tail.Hash)
			if err != nil {
				return nil, Tail{}, err
			}
			out = append(out, rec)
			tail = rec.Tail()
		}
		if len(msgs) > 0 {
			next = msgs[len(msgs)-1].Sequence + 1
		}
		if !more || len(msgs) == 0 {
			break
		}
	}
	switch {
	case !anchored:
		return nil, Tail{}, fmt.Errorf("read run %s: %w: position %d (stream seq %d) is not in the log", run, ErrBrokenChain, from.Count, from.Seq)
	case tail.Count == 0:
		return nil, Tail{}, fmt.Errorf("read run %s: %w", run, ErrNoRun)
	}
	return out, tail, nil
}

// maxBatch bounds one batch read (see [Log.GetBatch]): a long run is read
// in several, each with a reply channel of its size.
const maxBatch = 1024

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
