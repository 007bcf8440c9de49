package jsinbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MsgGet reads the first message of stream at or after stream sequence seq
// whose subject is subject, with the JetStream API's message get
// (STREAM.MSG.GET), whose reply is the server's JSON: the stored message's
// subject, sequence, time and data are fields the server wrote, not lines
// of a header block. [jetstream.ErrMsgNotFound] when there is none.
//
// It is for a stream whose messages' header blocks a user other than a
// worker chooses (the decisions stream, where the operator user
// publishes). The NATS client splits header lines at a bare "\n" and stops
// at the first empty line, which the server does not: a header block of
// the publisher's choosing can end early, so that what a direct get serves
// after it (the server's own headers) is never read, and whatever the
// publisher wrote before it (a status, a sequence) is read in its place.
// Nothing of a message's header block is read here: the message returned
// has no Header.
func (b *Inbox) MsgGet(ctx context.Context, apiPrefix, stream string, seq uint64, subject string) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(struct {
		Seq  uint64 `json:"seq"`
		Next string `json:"next_by_subj"`
	}{seq, subject})
	if err != nil {
		return nil, err
	}
	where := apiPrefix + "STREAM.MSG.GET." + stream
	m, err := b.request(ctx, where, req)
	if err != nil {
		return nil, err
	}
	if noResponders(m) {
		return nil, jetstream.ErrNoStreamResponse
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return nil, fmt.Errorf("message get on %s: reply is not the API's JSON: %w", where, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound):
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, fmt.Errorf("message get on %s: %d %s (code %d)", where, resp.Error.Code, resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil || resp.Message.Seq < seq || resp.Message.Subject != subject:
		return nil, fmt.Errorf("message get on %s: the reply holds no message of %s at or after %d", where, subject, seq)
	}
	return &jetstream.RawStreamMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Seq, Data: resp.Message.Data, Time: resp.Message.Time}, nil
}
