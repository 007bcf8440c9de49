package jsinbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrForgedHeader is the error of a single direct get ([Inbox.GetLast],
// [Inbox.GetSeq]) that served a stored message carrying a header only the
// server sets on what it serves: its own Nats-Stream, Nats-Subject,
// Nats-Sequence, Nats-Time-Stamp, Nats-Num-Pending or Nats-Last-Sequence,
// or a Status or Description.
//
// A direct get's reply is the stored message's own headers with the
// server's after them. Read as the JetStream client reads them (the first
// value of each), a publisher who stores a message with a Nats-Subject,
// Nats-Sequence or Status of its choosing decides where the message seems
// stored, what sequence it seems to have, or whether the reply seems an
// end of batch or a "not found". Here the server's values (the last of
// each, which the publisher cannot remove) are the only ones read, and no
// message Arbiter writes carries any of these headers: one that does is
// not Arbiter's. A single get fails with this error; a batch serves it
// with no body (see [Inbox.GetBatchPending]).
var ErrForgedHeader = errors.New("stored message carries a header only the server sets")

// servedHeaders are the headers the server adds to every stored message a
// direct get serves (a batch adds numPendingHeader and lastSeqHeader too).
var servedHeaders = [...]string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer}

const (
	lastSeqHeader     = "Nats-Last-Sequence"
	statusHeader      = "Status"
	descriptionHeader = "Description"
)

// isStatus reports whether m is a reply of the server's own (a 404, an end
// of batch) rather than a stored message. The server gives every stored
// message it serves a Nats-Sequence and no status reply one, and a
// publisher cannot take the server's header off what it stores: only
// messages without one are statuses. A stored message that carries a
// Status of its own is a stored message (a forged one, see [stored]),
// never a status, whatever its body.
func isStatus(m *nats.Msg) bool {
	return len(m.Header.Values(jetstream.SequenceHeader)) == 0
}

// stored reads a direct get's reply that [isStatus] says is a stored
// message: its data, with the subject, sequence and time the server gave
// it, the last value of each header (the server writes its own after the
// stored message's). forged names the first header the stored message
// carried of its own (see [ErrForgedHeader]); then the message returned
// holds only the server's headers and no data.
//
// A batch's messages carry two headers more from the server, the pending
// count and the batch's last sequence (batch is set); a single get's none.
func stored(m *nats.Msg, batch bool) (raw *jetstream.RawStreamMsg, forged string, err error) {
	last := func(h string) string {
		v := m.Header.Values(h)
		if len(v) == 0 {
			return ""
		}
		return v[len(v)-1]
	}
	for _, h := range servedHeaders {
		if n := len(m.Header.Values(h)); n == 0 {
			return nil, "", fmt.Errorf("reply without a %s header (headers %v)", h, m.Header)
		} else if n > 1 && forged == "" {
			forged = h
		}
	}
	served := 0
	if batch {
		served = 1
	}
	for _, h := range [...]string{numPendingHeader, lastSeqHeader} {
		if len(m.Header.Values(h)) > served && forged == "" {
			forged = h
		}
	}
	for _, h := range [...]string{statusHeader, descriptionHeader} {
		if len(m.Header.Values(h)) > 0 && forged == "" {
			forged = h
		}
	}
	subj := last(jetstream.SubjectHeader)
	seq, err := strconv.ParseUint(last(jetstream.SequenceHeader), 10, 64)
	if subj == "" || err != nil {
		return nil, "", fmt.Errorf("reply without a subject or sequence (headers %v)", m.Header)
	}
	tm, err := time.Parse(time.RFC3339Nano, last(jetstream.TimeStampHeaer))
	if err != nil {
		return nil, "", fmt.Errorf("reply for sequence %d: time stamp: %w", seq, err)
	}
	raw = &jetstream.RawStreamMsg{Subject: subj, Sequence: seq, Header: m.Header, Data: m.Data, Time: tm}
	if forged != "" {
		h := nats.Header{}
		for _, k := range servedHeaders {
			h.Set(k, last(k))
		}
		raw.Header, raw.Data = h, nil
	}
	return raw, forged, nil
}

// SubjectMark is the header a writer gives a message it stores where a
// relay could store one too (a bucket's keys): the subject it is written
// on. A relayed JetStream reply carries no header of a client's choosing
// without the server's own beside it (see [ErrForgedHeader]), so a message
// read with [Inbox.GetLast] or [Inbox.GetSeq] that carries this mark was
// published by a client with the right to publish there.
const SubjectMark = "Arbiter-Subject"

// Mark gives h the mark of a message written on subject.
func Mark(h nats.Header, subject string) { h.Set(SubjectMark, subject) }

// Marked reports whether m, as a direct get served it (its subject the
// server's), carries exactly one [SubjectMark] and that it names m's
// subject.
func Marked(m *jetstream.RawStreamMsg) bool {
	v := m.Header.Values(SubjectMark)
	return len(v) == 1 && v[0] == m.Subject
}

// statusError is the error of a direct get's status reply (see
// [isStatus]) other than those its reader takes as an answer: where names
// the request.
func statusError(where string, m *nats.Msg) error {
	switch status := m.Header.Get(statusHeader); status {
	case "503":
		return jetstream.ErrNoStreamResponse
	case "":
		return fmt.Errorf("%s: a reply that is neither a stored message nor a status (headers %v)", where, m.Header)
	default:
		return fmt.Errorf("%s: status %s %s", where, status, m.Header.Get(descriptionHeader))
	}
}

// GetLast reads the last message of stream whose subject matches subject
// (wildcards allowed), with a direct get on the inbox's connection:
// [jetstream.ErrMsgNotFound] when there is none. Its subject and sequence
// are the server's (see [ErrForgedHeader]), which the JetStream client's
// own direct get does not ensure: it takes the first of two.
func (b *Inbox) GetLast(ctx context.Context, apiPrefix, stream, subject string) (*jetstream.RawStreamMsg, error) {
	return b.getOne(ctx, apiPrefix+"DIRECT.GET."+stream+"."+subject, nil)
}

// GetSeq reads the message stream holds at sequence seq, as [Inbox.GetLast]
// does: [jetstream.ErrMsgNotFound] when there is none.
func (b *Inbox) GetSeq(ctx context.Context, apiPrefix, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(struct {
		Seq uint64 `json:"seq"`
	}{seq})
	if err != nil {
		return nil, err
	}
	return b.getOne(ctx, apiPrefix+"DIRECT.GET."+stream, req)
}

// getOne sends one direct get and reads its one reply.
func (b *Inbox) getOne(ctx context.Context, subject string, req []byte) (*jetstream.RawStreamMsg, error) {
	m, err := b.request(ctx, subject, req)
	if err != nil {
		return nil, err
	}
	if !isStatus(m) {
		raw, forged, err := stored(m, false)
		if err == nil && forged != "" {
			err = fmt.Errorf("direct get on %s: stream seq %d: %w (%s)", subject, raw.Sequence, ErrForgedHeader, forged)
		}
		if err != nil {
			return nil, err
		}
		return raw, nil
	}
	if m.Header.Get(statusHeader) == "404" {
		return nil, jetstream.ErrMsgNotFound
	}
	return nil, statusError("direct get on "+subject, m)
}

// request publishes data on subject with a reply subject of the inbox's
// and returns the one reply, within ctx or, when ctx has no deadline, the
// inbox's timeout.
func (b *Inbox) request(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	ch := make(chan reply, 1)
	tok, replyTo := b.register(waiter{ch: ch})
	defer b.forget(tok)
	if err := b.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: replyTo, Data: data}); err != nil {
		return nil, err
	}
	var expire <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	select {
	case r := <-ch:
		return r.m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-expire:
		return nil, nats.ErrTimeout
	case <-b.closed:
		return nil, nats.ErrConnectionClosed
	}
}
