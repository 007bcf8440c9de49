package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

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
	l     *Log
	pub   *publisher
	rec   Record
	msg   *nats.Msg
	ch    chan ack
	token string
	sent  time.Time // the last publish
	took  time.Duration
	hash  string // of the event's bytes, hashed while the server stores them
	after Tail
}

// ack is a reply to an append, with when it arrived.
type ack struct {
	m  *nats.Msg
	at time.Time
}

// Took returns how long the append took, from its publish to the arrival of
// its acknowledgement (or to Wait giving up), however late Wait was called.
func (p *Pending) Took() time.Duration { return p.took }

// Event returns the event as it is being stored: with its position and the
// hash of the event before it filled in.
func (p *Pending) Event() Event { return p.rec.Event }

// Begin starts appending ev to its run, fenced on tail, exactly as
// [Log.Append] does, but returns as soon as the event is published.
// An invalid event, or a publish the connection refuses, is an error at
// once; the outcome of the append is [Pending.Wait]'s.
func (l *Log) Begin(ctx context.Context, tail Tail, ev Event) (*Pending, error) {
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
	pub, err := l.publisher()
	if err != nil {
		return nil, fmt.Errorf("append %s to run %s: %w", ev.Kind, ev.Run, err)
	}
	if max := l.MaxEventBytes(); len(data) > max {
		return nil, fmt.Errorf("append %s to run %s: %w: %d bytes, the server takes at most %d", ev.Kind, ev.Run, ErrTooLarge, len(data), max)
	}
	p := &Pending{
		l: l, pub: pub,
		rec: Record{Event: ev, Data: data, Stream: l.StreamName(l.Shard(ev.Run))},
		msg: &nats.Msg{
			Subject: l.Subject(ev.Run, ev.Kind),
			Data:    data,
			// Set directly: the keys are already in canonical form.
			Header: nats.Header{
				jetstream.MsgIDHeader:                   {ev.ID},
				jetstream.ExpectedLastSubjSeqHeader:     {strconv.FormatUint(tail.Seq, 10)},
				jetstream.ExpectedLastSubjSeqSubjHeader: {l.RunFilter(ev.Run)},
			},
		},
		ch: make(chan ack, 1),
	}
	if err := pub.send(p); err != nil {
		return nil, fmt.Errorf("append %s to run %s: %w", ev.Kind, ev.Run, err)
	}
	p.hash = Hash(data)
	return p, nil
}

// Tail returns where the run stands after the append: valid once Wait has
// returned the record (it is the record's Tail).
func (p *Pending) Tail() Tail { return p.after }

// Publish retries after "no responders" (a stream leader being elected), as
// the JetStream client does for a synchronous publish: the event id makes a
// repeat harmless.
const (
	publishRetries   = 2
	publishRetryWait = 250 * time.Millisecond
	// publishTimeout bounds the wait for an ack when ctx sets no deadline,
	// as the JetStream client's default API timeout does.
	publishTimeout = 5 * time.Second
)

// Wait waits for the append's acknowledgement and returns the stored
// record, or the reason there is none: an error wrapping [ErrConflict] when
// another writer appended to the run first. An append whose outcome is not
// known (its ack lost, the wait cut short) is recognised as made when the
// run's last event is this one.
func (p *Pending) Wait(ctx context.Context) (Record, error) {
	ev := p.rec.Event
	seq, duplicate, err := p.await(ctx)
	if err == nil && duplicate {
		// The stream already holds a message under this event id: a repeat
		// of this very append, or another message given the same id. Only
		// the first is a success, whatever the ack says.
		if m, gerr := p.l.streams[p.l.Shard(ev.Run)].GetMsg(ctx, seq); gerr != nil {
			err = fmt.Errorf("event id %s is already stored at stream seq %d, which cannot be read to compare: %w", ev.ID, seq, gerr)
		} else if m.Subject != p.msg.Subject || !bytes.Equal(m.Data, p.rec.Data) {
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

// await waits for the ack, republishing after "no responders". It returns
// the stream sequence the ack names, and whether the server called the
// message a duplicate of one it holds.
func (p *Pending) await(ctx context.Context) (seq uint64, duplicate bool, err error) {
	var expire <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(publishTimeout)
		defer t.Stop()
		expire = t.C
	}
	pub := p.pub
	start := p.sent
	defer func() {
		if p.took == 0 {
			p.took = time.Since(start)
		}
	}()
	for attempt := 0; ; attempt++ {
		select {
		case a := <-p.ch:
			m := a.m
			if !noResponders(m) {
				p.took = a.at.Sub(start)
				return parseAck(m.Data)
			}
			if attempt >= publishRetries {
				return 0, false, jetstream.ErrNoStreamResponse
			}
			select {
			case <-time.After(publishRetryWait):
			case <-ctx.Done():
				return 0, false, ctx.Err()
			case <-expire:
				return 0, false, nats.ErrTimeout
			case <-pub.closed:
				return 0, false, nats.ErrConnectionClosed
			}
			if err := pub.send(p); err != nil {
				return 0, false, err
			}
		case <-ctx.Done():
			pub.forget(p.token)
			return 0, false, ctx.Err()
		case <-expire:
			pub.forget(p.token)
			return 0, false, nats.ErrTimeout
		case <-pub.closed:
			pub.forget(p.token)
			return 0, false, nats.ErrConnectionClosed
		}
	}
}

// noResponders reports the server's "no responders" status: nothing
// subscribes to the subject (no stream, or no leader yet).
func noResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header.Get("Status") == "503"
}

// parseAck reads a JetStream publish acknowledgement. The common one,
// {"stream":"<name>","seq":<n>} and nothing else, is read directly; any
// other (an error, a duplicate, a domain) goes through encoding/json.
func parseAck(b []byte) (seq uint64, duplicate bool, err error) {
	if seq, ok := plainAck(b); ok {
		return seq, false, nil
	}
	return decodeAck(b)
}

// plainAck reads {"stream":"<name>","seq":<n>} exactly, with a name of
// plain characters and n a positive decimal, and false for anything else.
func plainAck(b []byte) (uint64, bool) {
	const head, mid = `{"stream":"`, `","seq":`
	if len(b) < len(head) || string(b[:len(head)]) != head {
		return 0, false
	}
	i := len(head)
	for ; i < len(b) && b[i] != '"'; i++ {
		if c := b[i]; c == '\\' || c < 0x20 || c >= 0x7f {
			return 0, false
		}
	}
	if i == len(head) || len(b)-i < len(mid) || string(b[i:i+len(mid)]) != mid {
		return 0, false
	}
	i += len(mid)
	start := i
	var seq uint64
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		if i-start >= 19 { // beyond what surely fits: let encoding/json judge
			return 0, false
		}
		seq = seq*10 + uint64(b[i]-'0')
	}
	if i == start || b[start] == '0' || i != len(b)-1 || b[i] != '}' {
		return 0, false
	}
	return seq, true
}

func decodeAck(b []byte) (seq uint64, duplicate bool, err error) {
	var ack struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(b, &ack); err != nil {
		return 0, false, fmt.Errorf("%w: %q", jetstream.ErrInvalidJSAck, b)
	}
	if ack.Error != nil {
		return 0, false, fmt.Errorf("nats: %w", ack.Error)
	}
	if ack.Stream == "" || ack.Seq == 0 {
		return 0, false, fmt.Errorf("%w: %q", jetstream.ErrInvalidJSAck, b)
	}
	return ack.Seq, ack.Duplicate, nil
}

// publisher sends the appends made on one connection with a reply subject
// of its own and routes each ack to the append waiting for it: one
// subscription on a wildcard inbox (under the connection's inbox prefix),
// one token per attempt. Every log on the connection shares it; it goes
// when the connection closes.
type publisher struct {
	nc     *nats.Conn
	base   string        // "<inbox>."
	closed chan struct{} // closed when the connection is

	mu   sync.Mutex
	next uint64
	wait map[string]waiter
}

// waiter is where the replies to one token go: one reply (an append's ack),
// or many (a batch read's messages) until the reader forgets the token.
type waiter struct {
	ch   chan ack
	many bool
}

// publishers holds the publisher of each open connection.
var publishers = struct {
	sync.Mutex
	m map[*nats.Conn]*publisher
}{m: map[*nats.Conn]*publisher{}}

// publisher returns the publisher of the log's connection, subscribing its
// inbox on first use. The log keeps it: a connection, once closed, stays
// closed, and its publisher then refuses every send.
func (l *Log) publisher() (*publisher, error) {
	if p := l.pub.Load(); p != nil {
		return p, nil
	}
	p, err := publisherFor(l.js.Conn())
	if err != nil {
		return nil, err
	}
	l.pub.Store(p)
	return p, nil
}

// publisherFor returns nc's publisher, making it on first use.
func publisherFor(nc *nats.Conn) (*publisher, error) {
	publishers.Lock()
	defer publishers.Unlock()
	if p := publishers.m[nc]; p != nil {
		return p, nil
	}
	p := &publisher{nc: nc, base: nc.NewInbox() + ".", wait: map[string]waiter{}, closed: make(chan struct{})}
	sub, err := nc.Subscribe(p.base+"*", p.route)
	if err != nil {
		return nil, fmt.Errorf("subscribe to acks on %s*: %w", p.base, err)
	}
	// Acks arrive as fast as appends are made: never drop one for a slow
	// consumer limit.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("ack subscription: %w", err)
	}
	// An ack will never come on a closed connection: waiters must hear of
	// it at once, as a synchronous request does.
	status := nc.StatusChanged(nats.CLOSED)
	go func() {
		<-status
		publishers.Lock()
		if publishers.m[nc] == p {
			delete(publishers.m, nc)
		}
		publishers.Unlock()
		close(p.closed)
	}()
	if nc.IsClosed() {
		// Closed before the listener was in place: it would never hear.
		nc.RemoveStatusListener(status)
		return nil, nats.ErrConnectionClosed
	}
	publishers.m[nc] = p
	return p, nil
}

// register returns a fresh token whose replies go to w.
func (b *publisher) register(w waiter) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	tok := strconv.FormatUint(b.next, 36)
	b.wait[tok] = w
	return tok
}

// send publishes p's message under a fresh token.
func (b *publisher) send(p *Pending) error {
	tok := b.register(waiter{ch: p.ch})
	p.token = tok
	p.msg.Reply = b.base + tok
	if p.sent.IsZero() {
		p.sent = time.Now()
	}
	if err := b.nc.PublishMsg(p.msg); err != nil {
		b.forget(tok)
		return err
	}
	return nil
}

func (b *publisher) forget(tok string) {
	b.mu.Lock()
	delete(b.wait, tok)
	b.mu.Unlock()
}

// route hands a reply to whoever waits for its token; one nobody waits for
// any more (it gave up) is dropped, and so is one more than a batch reader
// made room for (the server sends at most what was asked): the
// subscription never blocks.
func (b *publisher) route(m *nats.Msg) {
	tok := m.Subject[len(b.base):]
	b.mu.Lock()
	w, ok := b.wait[tok]
	if ok && !w.many {
		delete(b.wait, tok)
	}
	b.mu.Unlock()
	if !ok {
		return
	}
	select {
	case w.ch <- ack{m, time.Now()}:
	default:
	}
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
	pub, err := l.publisher()
	if err != nil || pub.nc.MaxPayload() <= headroom {
		return 0
	}
	return int(pub.nc.MaxPayload()) - headroom
}
