package events

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

// GetBatch reads up to batch stored messages of stream, from stream
// sequence seq on, whose subjects match subject (any, when empty), with one
// batch direct get: raw, neither decoded nor checked, for a reader that
// checks them itself (an audit). It returns fewer when the stream has no
// more, and never more than 1,024: read on from the sequence after the
// last. The replies come back on the connection's shared reply
// subscription (see publisher), into a channel sized for the batch: no
// per-read subscription, whose default buffer is 512 KiB.
func (l *Log) GetBatch(ctx context.Context, stream string, seq uint64, batch int, subject string) ([]*jetstream.RawStreamMsg, error) {
	msgs, _, err := l.getBatch(ctx, stream, seq, batch, subject)
	return msgs, err
}

// getBatch is [Log.GetBatch] that also says whether the stream held more
// matching messages after the last one returned, as the server counted them
// when it answered (its end-of-batch pending count). The server reads on
// until it has batch messages or reaches the stream's end: a reader that
// knows how many it wants asks for that many.
func (l *Log) getBatch(ctx context.Context, stream string, seq uint64, batch int, subject string) (_ []*jetstream.RawStreamMsg, more bool, _ error) {
	if batch < 1 {
		return nil, false, nil
	}
	batch = min(batch, maxBatch)
	pub, err := l.publisher()
	if err != nil {
		return nil, false, err
	}
	req, err := json.Marshal(struct {
		Seq        uint64 `json:"seq"`
		Batch      int    `json:"batch"`
		NextBySubj string `json:"next_by_subj,omitempty"`
	}{seq, batch, subject})
	if err != nil {
		return nil, false, err
	}
	// Room for every message and the end-of-batch marker.
	ch := make(chan ack, batch+1)
	tok := pub.register(waiter{ch: ch, many: true})
	defer pub.forget(tok)
	msg := &nats.Msg{Subject: l.apiPrefix() + "DIRECT.GET." + stream, Reply: pub.base + tok, Data: req}
	if err := pub.nc.PublishMsg(msg); err != nil {
		return nil, false, err
	}
	var expire <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(publishTimeout)
		defer t.Stop()
		expire = t.C
	}
	out := make([]*jetstream.RawStreamMsg, 0, batch)
	for {
		select {
		case a := <-ch:
			m := a.m
			if len(m.Data) == 0 && m.Header.Get("Status") != "" {
				switch status := m.Header.Get("Status"); status {
				case "204": // end of batch
					np, err := strconv.ParseUint(m.Header.Get(numPendingHeader), 10, 64)
					if err != nil {
						return nil, false, fmt.Errorf("batch get from %s: end of batch without a pending count (headers %v)", stream, m.Header)
					}
					return out, np > 0, nil
				case "404": // nothing (more) to read
					return out, false, nil
				case "503":
					return nil, false, jetstream.ErrNoStreamResponse
				default:
					return nil, false, fmt.Errorf("batch get from %s: status %s %s", stream, status, m.Header.Get("Description"))
				}
			}
			raw, err := directMsg(m)
			if err != nil {
				return nil, false, fmt.Errorf("batch get from %s: %w", stream, err)
			}
			if len(out) == batch {
				return nil, false, fmt.Errorf("batch get from %s: more than the %d messages asked for", stream, batch)
			}
			out = append(out, raw)
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-expire:
			return nil, false, nats.ErrTimeout
		case <-pub.closed:
			return nil, false, nats.ErrConnectionClosed
		}
	}
}

// directMsg reads a direct get reply: the stored message's data, with its
// subject, sequence and time in headers.
func directMsg(m *nats.Msg) (*jetstream.RawStreamMsg, error) {
	subj := m.Header.Get(jetstream.SubjectHeader)
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if subj == "" || err != nil {
		return nil, fmt.Errorf("reply without a subject or sequence (headers %v)", m.Header)
	}
	tm, err := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, fmt.Errorf("reply for sequence %d: time stamp: %w", seq, err)
	}
	return &jetstream.RawStreamMsg{Subject: subj, Sequence: seq, Header: m.Header, Data: m.Data, Time: tm}, nil
}

// apiPrefix is the JetStream API prefix of the log's context, with its
// trailing dot.
func (l *Log) apiPrefix() string {
	o := l.js.Options()
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
