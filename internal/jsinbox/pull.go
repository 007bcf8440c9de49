package jsinbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Pull is one pull request to a consumer: the messages it delivers, read
// with [Pull.Next].
//
// A delivery is what the server sends with an acknowledgement subject
// ($JS.ACK.…) as its reply; a status of the server's (a 408 when the
// request expires, a 409) has none, and a publisher cannot give the
// message it stores one. The JetStream client instead takes any delivered
// message with an empty body and a Status header for a status, so a
// stored message claiming "409 Consumer Deleted" ended every fetch that
// met it, and, redelivered without limit, stopped a work queue behind it.
// Here such a message is a delivery like any other, for its reader to
// judge and settle.
//
// Each pull has a subscription of its own, on a fresh inbox subject: a
// delivery keeps its stream subject, so the inbox's shared subscription
// could not tell whose it is.
type Pull struct {
	sub     *nats.Subscription
	want    int
	got     int
	subject string
	until   time.Time
	done    bool
}

// Pull asks consumer on stream for up to batch messages, the server
// waiting up to expires for them, with one request on the inbox's
// connection.
func (b *Inbox) Pull(ctx context.Context, apiPrefix, stream, consumer string, batch int, expires time.Duration) (*Pull, error) {
	if batch < 1 {
		return nil, fmt.Errorf("pull from %s/%s: batch %d", stream, consumer, batch)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req, err := json.Marshal(struct {
		Batch   int   `json:"batch"`
		Expires int64 `json:"expires"`
	}{batch, expires.Nanoseconds()})
	if err != nil {
		return nil, err
	}
	replyTo := b.nc.NewInbox()
	sub, err := b.nc.SubscribeSync(replyTo)
	if err != nil {
		return nil, fmt.Errorf("pull from %s/%s: %w", stream, consumer, err)
	}
	p := &Pull{sub: sub, want: batch, subject: apiPrefix + "CONSUMER.MSG.NEXT." + stream + "." + consumer}
	if err := b.nc.PublishMsg(&nats.Msg{Subject: p.subject, Reply: replyTo, Data: req}); err != nil {
		p.Close()
		return nil, err
	}
	// The server ends the request with a 408 once expires has passed; the
	// client's own bound is later, for a server that never answers.
	p.until = time.Now().Add(expires + timeout)
	return p, nil
}

// Next returns the next message delivered, or io.EOF when the request is
// over: its batch delivered, or expired with fewer. A status other than
// the end of the request is an error. It gives up when ctx ends.
func (p *Pull) Next(ctx context.Context) (*Delivery, error) {
	if p.done {
		return nil, io.EOF
	}
	wait, cancel := context.WithDeadline(ctx, p.until)
	defer cancel()
	m, err := p.sub.NextMsgWithContext(wait)
	if err != nil {
		p.Close()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return nil, io.EOF // the server never said: over all the same
		}
		return nil, err
	}
	if strings.HasPrefix(m.Reply, "$JS.ACK.") {
		p.got++
		if p.got == p.want {
			p.Close()
		}
		return &Delivery{m: m}, nil
	}
	p.Close()
	switch status := m.Header.Get(statusHeader); status {
	case "404", "408":
		return nil, io.EOF // nothing (more) to deliver, or expired
	case "503":
		return nil, nats.ErrNoResponders // JetStream did not take the request
	case "":
		return nil, fmt.Errorf("pull on %s: a reply that is neither a delivery nor a status (headers %v)", p.subject, m.Header)
	default:
		return nil, fmt.Errorf("pull on %s: %w: %s %s", p.subject, ErrPullStatus, status, m.Header.Get(descriptionHeader))
	}
}

// Close ends the request on this side: what the server delivers after it
// is dropped, and redelivered once its ack wait passes.
func (p *Pull) Close() {
	if p.done {
		return
	}
	p.done = true
	_ = p.sub.Unsubscribe()
}

// ErrPullStatus is a pull request ended by a status of the server's other
// than its expiry (a 409: the consumer deleted, too many waiting pulls).
var ErrPullStatus = errors.New("pull request ended by the server")

// Delivery is a message a consumer delivered to a [Pull], settled on the
// acknowledgement subject the server gave it (the methods are those of
// jetstream.Msg that Arbiter's consumers use).
type Delivery struct{ m *nats.Msg }

// Subject is the subject the message was stored on.
func (d *Delivery) Subject() string { return d.m.Subject }

// Headers are the headers it was stored with.
func (d *Delivery) Headers() nats.Header { return d.m.Header }

// Data is its body.
func (d *Delivery) Data() []byte { return d.m.Data }

// Ack acknowledges it.
func (d *Delivery) Ack() error { return d.m.Ack() }

// DoubleAck acknowledges it and waits for the server to confirm.
func (d *Delivery) DoubleAck(ctx context.Context) error { return d.m.AckSync(nats.Context(ctx)) }

// Nak asks for it again at once.
func (d *Delivery) Nak() error { return d.m.Nak() }

// NakWithDelay asks for it again after delay.
func (d *Delivery) NakWithDelay(delay time.Duration) error { return d.m.NakWithDelay(delay) }

// InProgress tells the server it is being worked on (the ack wait starts again).
func (d *Delivery) InProgress() error { return d.m.InProgress() }

// Term tells the server never to deliver it again.
func (d *Delivery) Term() error { return d.m.Term() }

// NumDelivered is how many times the consumer has delivered it (0 if its
// ack subject does not say).
func (d *Delivery) NumDelivered() uint64 {
	md, err := d.m.Metadata()
	if err != nil {
		return 0
	}
	return md.NumDelivered
}
