package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/internal/jsinbox"
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
// A read is believed only whole. The run's tail is its last stored message
// itself, as the server gives it (its stream sequence and hash: the last
// message its index holds on the run's subjects, or the last a batch read
// returned when the server counts none left after it), never a position
// some message claims. Every message
// stored on the run's subjects from from up to that one must be the next
// event of the run: on its own subject, at the next position, chained on
// the hash of the one before, and the last must be that very message. A
// second message claiming a position already read, a message on the run's
// subjects that is no event of it, or a gap is an error wrapping
// [ErrBrokenChain], and nothing of the run is returned. A non-zero from
// must name a message the log holds (its stream sequence, position and
// hash): a snapshot's tail that the log does not have is refused the same
// way.
//
// A stream only grows at its end, so when the run's last message is from's
// own, nothing was added to the run since: that costs one lookup, as does
// finding a run's tail; anything newer is one more batch read, of as many
// messages as the last one's position says are left, so the server does
// not scan the rest of the stream. A read from the start needs no lookup:
// see [Log.readWhole].
func (l *Log) Since(ctx context.Context, run string, from Tail) ([]Record, Tail, error) {
	if err := ValidRunID(run); err != nil {
		return nil, Tail{}, err
	}
	if from.Count == 0 {
		return l.readWhole(ctx, run)
	}
	m, err := l.last(ctx, run)
	if err != nil {
		return nil, Tail{}, fmt.Errorf("read run %s: %w", run, err)
	}
	notInLog := func() error {
		return fmt.Errorf("read run %s: %w: position %d (stream seq %d, hash %.12s) is not in the log", run, ErrBrokenChain, from.Count, from.Seq, from.Hash)
	}
	switch {
	case m == nil && from.Count == 0:
		return nil, Tail{}, fmt.Errorf("read run %s: %w", run, ErrNoRun)
	case m == nil, from.Count > 0 && m.Sequence < from.Seq:
		return nil, Tail{}, notInLog()
	}
	last, err := Decode(m.Data)
	if err != nil {
		return nil, Tail{}, fmt.Errorf("read run %s at stream seq %d: %w", run, m.Sequence, err)
	}
	if from.Count > 0 && m.Sequence == from.Seq {
		if Hash(m.Data) != from.Hash || last.Run != run || last.Seq != from.Count || l.CheckStored(m.Subject, m.Header, last) != nil {
			return nil, Tail{}, notInLog()
		}
		return nil, from, nil
	}
	stream, filter := l.StreamName(l.Shard(run)), l.RunFilter(run)
	next, tail := uint64(1), from
	anchored := from.Count == 0 // the first message read must be from's own, unless from is the start
	if !anchored {
		next = from.Seq
	}
	var out []Record
	endSame := false // tail is m's own bytes, hashed as such
	for next <= m.Sequence {
		// Ask for as many messages as the last one's position says are
		// left (it is only a hint: the chain decides), so the server stops
		// at the run's end rather than scan the rest of the stream.
		want := maxBatch // the last message's claim is already false: read on to find where
		if last.Seq > tail.Count {
			want = int(min(last.Seq-tail.Count, maxBatch))
		}
		if !anchored {
			want = min(want+1, maxBatch)
		}
		msgs, err := l.getBatch(ctx, stream, next, want, filter)
		if err != nil {
			return nil, Tail{}, fmt.Errorf("read run %s: %w", run, err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, msg := range msgs {
			if msg.Sequence > m.Sequence {
				break // appended after the run's end was looked up
			}
			if !anchored {
				if msg.Sequence != from.Seq || Hash(msg.Data) != from.Hash {
					return nil, Tail{}, notInLog()
				}
				e, err := Decode(msg.Data)
				if err != nil || e.Run != run || e.Seq != from.Count || l.CheckStored(msg.Subject, msg.Header, e) != nil {
					return nil, Tail{}, notInLog()
				}
				anchored = true
				continue
			}
			// The run's last message was read and decoded above: when the
			// batch hands back the same bytes at its stream sequence, its
			// decoding is reused, and so is the hash the end is checked by.
			same := msg.Sequence == m.Sequence && bytes.Equal(msg.Data, m.Data)
			var rec Record
			if same {
				rec, err = l.chainedAs(run, stream, msg, last, tail.Count+1, tail.Hash)
			} else {
				rec, err = l.chained(run, stream, msg, tail.Count+1, tail.Hash)
			}
			if err != nil {
				return nil, Tail{}, err
			}
			out = append(out, rec)
			tail, endSame = rec.Tail(), same
		}
		next = msgs[len(msgs)-1].Sequence + 1
		if len(out) > 0 && tail.Seq == m.Sequence {
			break
		}
	}
	switch {
	case !anchored:
		return nil, Tail{}, notInLog()
	case tail.Seq != m.Sequence || (!endSame && tail.Hash != Hash(m.Data)):
		return nil, Tail{}, fmt.Errorf("read run %s: %w: its last stored message (stream seq %d) is not the end of its chain (read to stream seq %d, position %d)", run, ErrBrokenChain, m.Sequence, tail.Seq, tail.Count)
	}
	return out, tail, nil
}

// readWhole is [Log.Since] from the start: the run's end is where the
// server counts none of its messages left after a batch read (its
// end-of-batch pending count), so no lookup of the last message comes
// first. The first read asks for the run's first message alone; when the
// server counts more, the next asks from the stream's start again for
// exactly the run's count, the first message included, and each one after
// for exactly as many as are left: never more than the run has, so the
// server never scans the rest of the stream for messages that are not
// there, and its count of what is left is made from its index of the
// run's subjects, not by reading blocks. A run of one event, as a worker
// first loads a new run, costs one read. The rules are Since's: every
// message is the run's next event, chained on the one before, and the
// tail is the last of them.
func (l *Log) readWhole(ctx context.Context, run string) ([]Record, Tail, error) {
	stream, filter := l.StreamName(l.Shard(run)), l.RunFilter(run)
	msgs, left, err := l.getBatchPending(ctx, stream, 1, 1, filter)
	if err != nil {
		return nil, Tail{}, fmt.Errorf("read run %s: %w", run, err)
	}
	if len(msgs) == 0 {
		return nil, Tail{}, fmt.Errorf("read run %s: %w", run, ErrNoRun)
	}
	if left > 0 {
		first := msgs[0]
		if msgs, left, err = l.getBatchPending(ctx, stream, 1, int(min(left+1, maxBatch)), filter); err != nil {
			return nil, Tail{}, fmt.Errorf("read run %s: %w", run, err)
		}
		if len(msgs) == 0 || msgs[0].Sequence != first.Sequence || !bytes.Equal(msgs[0].Data, first.Data) {
			// Only a message removed from the stream between the two reads
			// changes the run's first one.
			return nil, Tail{}, fmt.Errorf("read run %s: its first message (stream seq %d) changed between two reads", run, first.Sequence)
		}
	}
	out := make([]Record, 0, len(msgs)+int(left))
	var tail Tail
	for {
		for _, msg := range msgs {
			rec, err := l.chained(run, stream, msg, tail.Count+1, tail.Hash)
			if err != nil {
				return nil, Tail{}, err
			}
			out = append(out, rec)
			tail = rec.Tail()
		}
		if left == 0 {
			return out, tail, nil
		}
		next := msgs[len(msgs)-1].Sequence + 1
		if msgs, left, err = l.getBatchPending(ctx, stream, next, int(min(left, maxBatch)), filter); err != nil {
			return nil, Tail{}, fmt.Errorf("read run %s: %w", run, err)
		}
		if len(msgs) == 0 {
			return nil, Tail{}, fmt.Errorf("read run %s: no messages from stream seq %d on, where the read before counted more", run, next)
		}
	}
}

// maxBatch bounds one batch read (see [jsinbox.GetBatch]): a long run is
// read in several, each with a reply channel of its size.
const maxBatch = jsinbox.MaxBatch

func (l *Log) chained(run, stream string, m *jetstream.RawStreamMsg, seq uint64, prev string) (Record, error) {
	if len(m.Data) == 0 {
		// Never an event: a batch serves a stored message that carried a
		// header only the server sets with no body (jsinbox.ErrForgedHeader).
		return Record{}, fmt.Errorf("read run %s: %w", run, &ChainError{Index: int(seq - 1), Seq: seq, Reason: fmt.Sprintf("stream seq %d on %s has no body, or carried a header only the server sets", m.Sequence, m.Subject)})
	}
	e, err := Decode(m.Data)
	if err != nil {
		return Record{}, fmt.Errorf("read run %s at stream seq %d: %w", run, m.Sequence, err)
	}
	return l.chainedAs(run, stream, m, e, seq, prev)
}

// chainedAs is chained for message m already decoded as e.
func (l *Log) chainedAs(run, stream string, m *jetstream.RawStreamMsg, e Event, seq uint64, prev string) (Record, error) {
	if err := l.CheckStored(m.Subject, m.Header, e); err != nil {
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
