package jsinbox

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestMsgGet_TheServersJSONOnly: the API's message get reads the first
// message of a subject from a sequence on, with its subject, sequence and
// body from the server's JSON, and nothing of its header block: every
// forgery that claims where it is stored, at what sequence, or that it is
// a status or the end of a batch, is returned as the message it is, on its
// true sequence, with no headers. Past the last message it is
// ErrMsgNotFound, and a message on another subject is passed over.
func TestMsgGet_TheServersJSONOnly(t *testing.T) {
	_, ctx, js, b := served(t)
	const subj = "s.msgget.e"
	if _, err := js.Publish(ctx, "s.other.e", []byte("elsewhere")); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, f := range forgeries {
		ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: f.hdr, Data: []byte(f.name)})
		if err != nil {
			t.Fatalf("%s: publish: %v", f.name, err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	from := uint64(1)
	for i, f := range forgeries {
		m, err := b.MsgGet(ctx, "$JS.API.", "S", from, subj)
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		if m.Sequence != seqs[i] || m.Subject != subj || string(m.Data) != f.name || m.Header != nil || m.Time.IsZero() {
			t.Errorf("%s: got %s seq %d %q headers %v time %v, want %s seq %d %q, no headers", f.name, m.Subject, m.Sequence, m.Data, m.Header, m.Time, subj, seqs[i], f.name)
		}
		from = m.Sequence + 1
	}
	if _, err := b.MsgGet(ctx, "$JS.API.", "S", from, subj); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("past the last: %v, want ErrMsgNotFound", err)
	}
	if _, err := b.MsgGet(ctx, "$JS.API.", "NOSUCH", 1, subj); err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a stream that does not exist: %v, want the API's error", err)
	}
}
