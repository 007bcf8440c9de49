package jsinbox

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Inbox sends requests on one connection with a reply subject of its own
// and routes each reply to the request waiting for it: one subscription on
// a wildcard inbox (under the connection's inbox prefix), one token per
// attempt. Everything on the connection shares it; it goes when the
// connection closes.
type Inbox struct {
	nc     *nats.Conn
	base   string        // "<inbox>."
	closed chan struct{} // closed when the connection is

	mu   sync.Mutex
	next uint64
	wait map[string]waiter // by token: a reply subject's last token
}

// reply is a message that came back to the inbox, with when it arrived.
type reply struct {
	m  *nats.Msg
	at time.Time
}

// waiter is where the replies to one token go: one reply (an ack), or many
// (a batch read's messages) until the reader forgets the token.
type waiter struct {
	ch   chan reply
	many bool
}

// inboxes holds the inbox of each open connection.
var inboxes = struct {
	sync.Mutex
	m map[*nats.Conn]*Inbox
}{m: map[*nats.Conn]*Inbox{}}

// For returns nc's inbox, subscribing it on first use. A connection, once
// closed, stays closed: its inbox then refuses every send, and For on it
// returns [nats.ErrConnectionClosed].
func For(nc *nats.Conn) (*Inbox, error) {
	inboxes.Lock()
	defer inboxes.Unlock()
	if b := inboxes.m[nc]; b != nil {
		return b, nil
	}
	b := &Inbox{nc: nc, base: nc.NewInbox() + ".", wait: map[string]waiter{}, closed: make(chan struct{})}
	sub, err := nc.Subscribe(b.base+"*", b.route)
	if err != nil {
		return nil, fmt.Errorf("subscribe to replies on %s*: %w", b.base, err)
	}
	// Acks arrive as fast as appends are made: never drop one for a slow
	// consumer limit.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("reply subscription: %w", err)
	}
	// A reply will never come on a closed connection: waiters must hear of
	// it at once, as a synchronous request does.
	status := nc.StatusChanged(nats.CLOSED)
	go func() {
		<-status
		inboxes.Lock()
		if inboxes.m[nc] == b {
			delete(inboxes.m, nc)
		}
		inboxes.Unlock()
		close(b.closed)
	}()
	if nc.IsClosed() {
		// Closed before the listener was in place: it would never hear.
		nc.RemoveStatusListener(status)
		return nil, nats.ErrConnectionClosed
	}
	inboxes.m[nc] = b
	return b, nil
}

// MaxPayload is the largest message the connection's server takes, as the
// connection was told it.
func (b *Inbox) MaxPayload() int64 { return b.nc.MaxPayload() }

// register returns a fresh token whose replies go to w, and the reply
// subject that names it. The token is the subject's tail: one string.
func (b *Inbox) register(w waiter) (tok, subject string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	var buf [128]byte
	subject = string(strconv.AppendUint(append(buf[:0], b.base...), b.next, 36))
	tok = subject[len(b.base):]
	b.wait[tok] = w
	return tok, subject
}

func (b *Inbox) forget(tok string) {
	b.mu.Lock()
	delete(b.wait, tok)
	b.mu.Unlock()
}

// route hands a reply to whoever waits for its token; one nobody waits for
// any more (it gave up) is dropped, and so is one more than a batch reader
// made room for (the server sends at most what was asked): the
// subscription never blocks.
func (b *Inbox) route(m *nats.Msg) {
	if len(m.Subject) <= len(b.base) || m.Subject[:len(b.base)] != b.base {
		return // not a reply to a token: a delivery keeps its stream subject
	}
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
	case w.ch <- reply{m, time.Now()}:
	default:
	}
}
