package jsinbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A publish retries after "no responders" (a stream leader being elected),
// as the JetStream client does for a synchronous publish: the message id
// makes a repeat harmless.
const (
	publishRetries   = 2
	publishRetryWait = 250 * time.Millisecond
	// timeout bounds the wait for a reply when ctx sets no deadline, as
	// the JetStream client's default API timeout does.
	timeout = 5 * time.Second
)

// Ack is a JetStream publish on its way: sent, its acknowledgement not yet
// awaited. Wait must be called exactly once; an Ack is not safe for
// concurrent use.
type Ack struct {
	b     *Inbox
	msg   *nats.Msg
	ch    chan reply
	token string
	sent  time.Time // the first publish
	took  time.Duration
	// answered is set once Wait has taken the reply that ends it: nothing
	// is registered on ch any more, so no late reply can arrive there.
	answered bool
	timer    *time.Timer // Wait's bound without a deadline, kept for reuse
}

// Publish sends m, a message to a stream, with a reply subject on the
// inbox, and returns as soon as it is sent. m's Reply is the inbox's; the
// caller must not touch m again. A publish the connection refuses is an
// error at once; the server's answer is [Ack.Wait]'s.
//
// The Ack is returned by value, so that a caller may keep it inside its own
// record of the publish at no allocation of its own.
func (b *Inbox) Publish(m *nats.Msg) (Ack, error) {
	var a Ack
	if err := b.PublishInto(&a, m); err != nil {
		return Ack{}, err
	}
	return a, nil
}

// PublishInto is [Inbox.Publish] into a, the zero Ack or one whose Wait
// has returned, for a writer that keeps one Ack for its appends one after
// the other. a's channel and timer are used again only when its Wait took
// the reply that ended it; after a wait that gave up, a reply to the
// earlier publish may still be on its way to that channel, so a fresh one
// is made.
func (b *Inbox) PublishInto(a *Ack, m *nats.Msg) error {
	ch, timer := a.ch, a.timer
	if !a.answered || ch == nil {
		ch, timer = make(chan reply, 1), nil
	}
	*a = Ack{b: b, msg: m, ch: ch, timer: timer}
	return a.send()
}

// send publishes the message under a fresh token.
func (a *Ack) send() error {
	tok, reply := a.b.register(waiter{ch: a.ch})
	a.token = tok
	a.msg.Reply = reply
	if a.sent.IsZero() {
		a.sent = time.Now()
	}
	if err := a.b.nc.PublishMsg(a.msg); err != nil {
		a.b.forget(tok)
		return err
	}
	return nil
}

// Took returns how long the publish took, from its first send to the
// arrival of its acknowledgement (or to Wait giving up), however late Wait
// was called.
func (a *Ack) Took() time.Duration { return a.took }

// Wait waits for the acknowledgement, publishing again after "no
// responders" (at most twice, a quarter second apart), and returns the
// stream sequence it names and whether the server called the message a
// duplicate of one it holds. Without a deadline in ctx it waits at most
// five seconds ([nats.ErrTimeout]); a closed connection is
// [nats.ErrConnectionClosed], a stream that never answered
// [jetstream.ErrNoStreamResponse], an error the server answered a
// [*jetstream.APIError].
func (a *Ack) Wait(ctx context.Context) (seq uint64, duplicate bool, err error) {
	var expire <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		if a.timer == nil {
			a.timer = time.NewTimer(timeout)
		} else {
			a.timer.Reset(timeout)
		}
		defer a.timer.Stop()
		expire = a.timer.C
	}
	b := a.b
	start := a.sent
	defer func() {
		if a.took == 0 {
			a.took = time.Since(start)
		}
	}()
	for attempt := 0; ; attempt++ {
		select {
		case r := <-a.ch:
			m := r.m
			if !noResponders(m) {
				a.took = r.at.Sub(start)
				a.answered = true
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
			case <-b.closed:
				return 0, false, nats.ErrConnectionClosed
			}
			if err := a.send(); err != nil {
				return 0, false, err
			}
		case <-ctx.Done():
			b.forget(a.token)
			return 0, false, ctx.Err()
		case <-expire:
			b.forget(a.token)
			return 0, false, nats.ErrTimeout
		case <-b.closed:
			b.forget(a.token)
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
