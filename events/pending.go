package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Pending is an append on its way: published, its acknowledgement not yet
// awaited. [Log.Begin] returns one so that a writer can do work that does not
// depend on the append's outcome (folding the event, checking what comes
// next) while the server stores it; it must not act on that work until
// [Pending.Wait] says the append was made.
//
// Wait must be called exactly once; a Pending is not safe for concurrent use.
type Pending struct {
	l       *Log
	rec     Record
	subject string
	ack     jsinbox.Ack
	hash    string // of the event's bytes, hashed while the server stores them
	after   Tail
	// The message and its header values live here, with the append, so
	// that publishing it allocates no more than the header map.
	msg  nats.Msg
	vals [3]string
	// made keeps the subjects of the last two kinds appended to this run,
	// for a Pending used again (see [Log.BeginReusing]): a run's appends
	// alternate between few kinds, and each subject is a string to build.
	made [2]madeSubject
}

type madeSubject struct {
	kind    Kind
	subject string
}

// Took returns how long the append took, from its publish to the arrival of
// its acknowledgement (or to Wait giving up), however late Wait was called.
func (p *Pending) Took() time.Duration { return p.ack.Took() }

// Event returns the event as it is being stored: with its position and the
// hash of the event before it filled in.
func (p *Pending) Event() Event { return p.rec.Event }

// Begin starts appending ev to its run, fenced on tail, exactly as
// [Log.Append] does, but returns as soon as the event is published.
// An invalid event, or a publish the connection refuses, is an error at
// once; the outcome of the append is [Pending.Wait]'s.
func (l *Log) Begin(ctx context.Context, tail Tail, ev Event) (*Pending, error) {
	return l.BeginReusing(ctx, nil, tail, ev)
}

// BeginReusing is [Log.Begin] in spare's memory, when spare is not nil: a
// Pending of this log whose Wait has returned, and that its holder lets go
// of (it must not use spare again, other than as what this returns). A
// writer whose appends follow one another keeps one Pending for them all,
// instead of a message, its header map and its acknowledgement's channel
// for each. The Record spare's Wait returned is the caller's to keep: its
// bytes are never written again. On an error spare is not to be used
// again.
func (l *Log) BeginReusing(ctx context.Context, spare *Pending, tail Tail, ev Event) (*Pending, error) {
	if spare != nil && spare.l != l {
		spare = nil
	}
	if err := ValidRunID(ev.Run); err != nil {
		return nil, fmt.Errorf("append: %w", err)
	}
	if err := ev.Kind.check(); err != nil {
		return nil, fmt.Errorf("append to run %s: %w", ev.Run, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("append %s to run %s: %w", ev.Kind, ev.Run, err)
	}
	ev.V = FormatVersion
	ev.Seq = tail.Count + 1
	ev.Prev = tail.Hash
	data, err := ev.Encode()
	if err != nil {
		return nil, err
	}
	inbox, err := l.inbox()
	if err != nil {
		return nil, fmt.Errorf("append %s to run %s: %w", ev.Kind, ev.Run, err)
	}
	if max := l.MaxEventBytes(); len(data) > max {
		return nil, fmt.Errorf("append %s to run %s: %w: %d bytes, the server takes at most %d", ev.Kind, ev.Run, ErrTooLarge, len(data), max)
	}
	shard := l.Shard(ev.Run)
	p := spare
	if p == nil {
		p = new(Pending)
	}
	hdr, made, filter := p.msg.Header, p.made, ""
	if p.rec.Event.Run == ev.Run && ev.Run != "" {
		filter = p.vals[2]
	} else {
		made = [2]madeSubject{}
	}
	if filter == "" {
		filter = l.runFilterOn(shard, ev.Run)
	}
	var subject string
	switch {
	case made[0].subject != "" && made[0].kind == ev.Kind:
		subject = made[0].subject
	case made[1].subject != "" && made[1].kind == ev.Kind:
		subject = made[1].subject
		made[0], made[1] = made[1], made[0]
	default:
		subject = l.subjectOn(shard, ev.Run, ev.Kind)
		made[0], made[1] = madeSubject{ev.Kind, subject}, made[0]
	}
	*p = Pending{
		l:       l,
		rec:     Record{Event: ev, Data: data, Stream: l.StreamName(shard)},
		subject: subject,
		ack:     p.ack,
		made:    made,
	}
	p.vals = [3]string{ev.ID, strconv.FormatUint(tail.Seq, 10), filter}
	if hdr == nil {
		// Set directly: the keys are already in canonical form. The
		// values are p.vals, so a Pending used again keeps its map.
		hdr = nats.Header{
			jetstream.MsgIDHeader:                   p.vals[0:1:1],
			jetstream.ExpectedLastSubjSeqHeader:     p.vals[1:2:2],
			jetstream.ExpectedLastSubjSeqSubjHeader: p.vals[2:3:3],
		}
	}
	p.msg = nats.Msg{Subject: p.subject, Data: data, Header: hdr}
	if err := inbox.PublishInto(&p.ack, &p.msg); err != nil {
		return nil, fmt.Errorf("append %s to run %s: %w", ev.Kind, ev.Run, err)
	}
	p.hash = Hash(data)
	return p, nil
}

// Tail returns where the run stands after the append: valid once Wait has
// returned the record (it is the record's Tail).
func (p *Pending) Tail() Tail { return p.after }

// Stored is the run's tail if this append is stored, but for its stream
// sequence, which is the server's to give: its count and the hash of its
// bytes. After a Wait that failed, a run read again whose tail has them
// ends with this very event, stored all the same, and nothing after it.
func (p *Pending) Stored() Tail { return Tail{Count: p.rec.Event.Seq, Hash: p.hash} }

// Wait waits for the append's acknowledgement and returns the stored
// record, or the reason there is none: an error wrapping [ErrConflict] when
// another writer appended to the run first. An append whose outcome is not
// known (its ack lost, the wait cut short) is recognised as made when the
// run's last event is this one.
func (p *Pending) Wait(ctx context.Context) (Record, error) {
	ev := p.rec.Event
	seq, duplicate, err := p.ack.Wait(ctx)
	if err == nil && duplicate {
		// The stream already holds a message under this event id: a repeat
		// of this very append, or another message given the same id. Only
		// the first is a success, whatever the ack says.
		if m, gerr := p.l.getSeq(ctx, p.rec.Stream, seq); gerr != nil {
			err = fmt.Errorf("event id %s is already stored at stream seq %d, which cannot be read to compare: %w", ev.ID, seq, gerr)
		} else if m.Subject != p.subject || !bytes.Equal(m.Data, p.rec.Data) {
			return Record{}, fmt.Errorf("append %s to run %s: %w: stream seq %d holds another message (on %s) under event id %s", ev.Kind, ev.Run, ErrConflict, seq, m.Subject, ev.ID)
		}
	}
	if err == nil {
		p.rec.StreamSeq = seq
		p.after = Tail{Seq: seq, Count: ev.Seq, Hash: p.hash}
		return p.rec, nil
	}
	// A lost race, or an attempt whose outcome we do not know: the event may
	// be ours already (stored, ack lost). Only the run's last message says.
	if isConflict(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		last, lerr := p.l.last(ctx, ev.Run)
		if lerr == nil && last != nil && last.Header.Get(jetstream.MsgIDHeader) == ev.ID && bytes.Equal(last.Data, p.rec.Data) {
			rec := Record{Event: ev, Data: last.Data, Stream: p.rec.Stream, StreamSeq: last.Sequence}
			p.after = rec.Tail()
			return rec, nil
		}
		if isConflict(err) {
			return Record{}, fmt.Errorf("append %s to run %s at %d: %w", ev.Kind, ev.Run, ev.Seq, ErrConflict)
		}
	}
	return Record{}, fmt.Errorf("append %s to run %s: %w", ev.Kind, ev.Run, err)
}

// ErrTooLarge marks an event the server would refuse for its size: it is
// never sent. The writer records something smaller instead (the driver
// fails the run closed, naming the size), so a run never waits on an
// append that can never be made.
var ErrTooLarge = errors.New("event too large to store")

// headroom is what an append's headers (message id, fence) and the
// server's own framing take of the maximum payload.
const headroom = 1 << 10

// MaxEventBytes is the largest encoded event an append sends: the server's
// maximum payload, as the connection was told it, less the headers'
// headroom.
func (l *Log) MaxEventBytes() int {
	inbox, err := l.inbox()
	if err != nil || inbox.MaxPayload() <= headroom {
		return 0
	}
	return int(inbox.MaxPayload()) - headroom
}

// inbox returns the inbox of the log's connection (see [jsinbox.For]).
// The log keeps it: a connection, once closed, stays closed, and its inbox
// then refuses every send.
func (l *Log) inbox() (*jsinbox.Inbox, error) {
	if b := l.box.Load(); b != nil {
		return b, nil
	}
	b, err := jsinbox.For(l.js.Conn())
	if err != nil {
		return nil, err
	}
	l.box.Store(b)
	return b, nil
}

// getBatchPending is getBatch that also returns how many matching
// messages are left after the batch (see [jsinbox.Inbox.GetBatchPending]).
func (l *Log) getBatchPending(ctx context.Context, stream string, seq uint64, batch int, subject string) ([]*jetstream.RawStreamMsg, uint64, error) {
	b, err := l.inbox()
	if err != nil {
		return nil, 0, err
	}
	msgs, left, err := b.GetBatchPending(ctx, jsinbox.APIPrefix(l.js), stream, seq, batch, subject)
	return msgs, left, forged(err)
}

// getBatch reads with one batch direct get on the log's connection (see
// [jsinbox.GetBatch]).
func (l *Log) getBatch(ctx context.Context, stream string, seq uint64, batch int, subject string) ([]*jetstream.RawStreamMsg, error) {
	b, err := l.inbox()
	if err != nil {
		return nil, err
	}
	msgs, err := b.GetBatch(ctx, jsinbox.APIPrefix(l.js), stream, seq, batch, subject)
	return msgs, forged(err)
}

// getSeq reads the message stream holds at seq (see [jsinbox.Inbox.GetSeq]).
func (l *Log) getSeq(ctx context.Context, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	b, err := l.inbox()
	if err != nil {
		return nil, err
	}
	m, err := b.GetSeq(ctx, jsinbox.APIPrefix(l.js), stream, seq)
	return m, forged(err)
}

// forged marks a read that met a stored message with a header only the
// server sets ([jsinbox.ErrForgedHeader]) as a broken chain: that message
// is not an event Arbiter wrote, on whatever subject it lies, and the run
// (or the scan) it is part of fails closed, as it does for any other
// message that is not the next event.
func forged(err error) error {
	if errors.Is(err, jsinbox.ErrForgedHeader) {
		return fmt.Errorf("%w: %w", ErrBrokenChain, err)
	}
	return err
}
