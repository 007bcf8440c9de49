package jsinbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxBatch bounds one batch direct get: the server serves at most this
// many messages to one request.
const MaxBatch = 1024

// GetBatch reads up to batch stored messages of stream, from stream
// sequence seq on, whose subjects match subject (any, when empty), with one
// batch direct get on js's connection and API prefix: raw, neither decoded
// nor checked, for a reader that checks them itself. It returns fewer when
// the stream has no more, and never more than [MaxBatch]: read on from the
// sequence after the last. The server reads on until it has batch messages
// or reaches the stream's end: a reader that knows how many it wants asks
// for that many. The stream must allow direct gets. Every message's
// subject, sequence and time are the server's: a stored message that
// carries a header only the server sets ([ErrForgedHeader]) is returned
// on the subject and at the sequence the server gave it, with only the
// server's headers and no body, garbage to any reader; it never ends the
// batch or changes its count.
func GetBatch(ctx context.Context, js jetstream.JetStream, stream string, seq uint64, batch int, subject string) ([]*jetstream.RawStreamMsg, error) {
	b, err := For(js.Conn())
	if err != nil {
		return nil, err
	}
	return b.GetBatch(ctx, APIPrefix(js), stream, seq, batch, subject)
}

// GetBatch is [GetBatch] on the inbox's connection, with the JetStream API
// prefix (with its trailing dot, see [APIPrefix]) given.
func (b *Inbox) GetBatch(ctx context.Context, apiPrefix, stream string, seq uint64, batch int, subject string) ([]*jetstream.RawStreamMsg, error) {
	msgs, _, err := b.GetBatchPending(ctx, apiPrefix, stream, seq, batch, subject)
	return msgs, err
}

// GetBatchPending is [Inbox.GetBatch] that also returns how many messages
// matching subject the stream holds after the last one returned, as the
// server counted them when it ended the batch (its end-of-batch
// Nats-Num-Pending, counted again if the stream grew while the batch was
// read; a read that found nothing has none after it). A count of zero
// means the last message returned was the last one matching subject when
// the batch ended.
func (b *Inbox) GetBatchPending(ctx context.Context, apiPrefix, stream string, seq uint64, batch int, subject string) ([]*jetstream.RawStreamMsg, uint64, error) {
	if batch < 1 {
		return nil, 0, nil
	}
	batch = min(batch, MaxBatch)
	req, err := json.Marshal(struct {
		Seq        uint64 `json:"seq"`
		Batch      int    `json:"batch"`
		NextBySubj string `json:"next_by_subj,omitempty"`
	}{seq, batch, subject})
	if err != nil {
		return nil, 0, err
	}
	// Room for every message and the end-of-batch marker: a channel sized
	// for the batch, no per-read subscription.
	ch := make(chan reply, batch+1)
	tok, replyTo := b.register(waiter{ch: ch, many: true})
	defer b.forget(tok)
	msg := &nats.Msg{Subject: apiPrefix + "DIRECT.GET." + stream, Reply: replyTo, Data: req}
	if err := b.nc.PublishMsg(msg); err != nil {
		return nil, 0, err
	}
	var expire <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	out := make([]*jetstream.RawStreamMsg, 0, batch)
	for {
		select {
		case r := <-ch:
			m := r.m
			if isStatus(m) {
				switch status := m.Header.Get(statusHeader); status {
				case "204": // end of batch
					pending, err := strconv.ParseUint(m.Header.Get(numPendingHeader), 10, 64)
					if err != nil || len(m.Header.Values(numPendingHeader)) != 1 {
						return nil, 0, fmt.Errorf("batch get from %s: end of batch without a pending count (headers %v)", stream, m.Header)
					}
					return out, pending, nil
				case "404": // nothing (more) to read
					return out, 0, nil
				default:
					return nil, 0, statusError("batch get from "+stream, m)
				}
			}
			// A stored message with headers of the server's own comes with
			// no body: garbage to every reader, on its true subject.
			raw, _, err := stored(m, true)
			if err != nil {
				return nil, 0, fmt.Errorf("batch get from %s: %w", stream, err)
			}
			if len(out) == batch {
				return nil, 0, fmt.Errorf("batch get from %s: more than the %d messages asked for", stream, batch)
			}
			out = append(out, raw)
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-expire:
			return nil, 0, nats.ErrTimeout
		case <-b.closed:
			return nil, 0, nats.ErrConnectionClosed
		}
	}
}

// APIPrefix is the JetStream API prefix of js, with its trailing dot:
// "$JS.API." unless js was made with a prefix or a domain.
func APIPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		if strings.HasSuffix(o.APIPrefix, ".") {
			return o.APIPrefix
		}
		return o.APIPrefix + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return "$JS.API."
}

// numPendingHeader is the header of a batch reply that counts the matching
// messages after it.
const numPendingHeader = "Nats-Num-Pending"
