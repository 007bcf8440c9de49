package jsinbox

import (
	"errors"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// forgeries are stored messages whose own headers claim what only the
// server may say of a message it serves: where it is stored, at what
// sequence, that it is the end of a batch (and how many follow), that
// nothing was found.
var forgeries = []struct {
	name string
	hdr  nats.Header
	data string
}{
	{"subject", nats.Header{jetstream.SubjectHeader: {"s.other"}}, "x"},
	{"sequence", nats.Header{jetstream.SequenceHeader: {"1"}}, "x"},
	{"stream", nats.Header{jetstream.StreamHeader: {"T"}}, "x"},
	{"time stamp", nats.Header{jetstream.TimeStampHeaer: {"2001-01-01T00:00:00Z"}}, "x"},
	{"end of batch, none left", nats.Header{"Status": {"204"}, "Nats-Num-Pending": {"0"}}, ""},
	{"end of batch with a body", nats.Header{"Status": {"204"}, "Nats-Num-Pending": {"0"}}, "x"},
	{"not found", nats.Header{"Status": {"404"}}, ""},
	{"no responders", nats.Header{"Status": {"503"}}, ""},
	{"description", nats.Header{"Description": {"EOB"}}, ""},
	{"pending count", nats.Header{"Nats-Num-Pending": {"0"}}, "x"},
	{"last sequence", nats.Header{"Nats-Last-Sequence": {"1"}}, "x"},
}

// TestStored_ServerHeadersOnly stores, on a real server, one message of
// each forgery between two plain ones, and reads them back every way: a
// batch serves the forged one on its true subject and sequence, with no
// body and only the server's headers, and goes on to the plain message
// after it with the server's count; a single get (the last by subject, or
// by sequence) refuses it with ErrForgedHeader. The JetStream client's own
// direct get, read for comparison, believes the forgery (which is why it
// is not used): that check makes the test fail if a server or client
// version stops serving the stored headers first.
func TestStored_ServerHeadersOnly(t *testing.T) {
	_, ctx, js, b := served(t)
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	believed := 0
	for i, f := range forgeries {
		subj := "s.run" + strconv.Itoa(i) + ".e"
		var seqs []uint64
		for k, m := range []*nats.Msg{
			{Subject: subj, Data: []byte("before")},
			{Subject: subj, Header: f.hdr, Data: []byte(f.data)},
			{Subject: subj, Data: []byte("after")},
		} {
			if k == 2 {
				// The last-by-subject get must meet the forgery: the plain
				// message after it is stored once those gets are made.
				if _, err := b.GetLast(ctx, "$JS.API.", "S", "s.run"+strconv.Itoa(i)+".>"); !errors.Is(err, ErrForgedHeader) {
					t.Errorf("%s: GetLast: got %v, want ErrForgedHeader", f.name, err)
				}
				jm, jerr := s.GetLastMsgForSubject(ctx, "s.run"+strconv.Itoa(i)+".>")
				if jerr != nil || jm.Subject != subj || jm.Sequence != seqs[1] {
					believed++
				}
			}
			ack, err := js.PublishMsg(ctx, m)
			if err != nil {
				t.Fatalf("%s: publish: %v", f.name, err)
			}
			seqs = append(seqs, ack.Sequence)
		}

		msgs, left, err := b.GetBatchPending(ctx, "$JS.API.", "S", seqs[0], 3, "s.run"+strconv.Itoa(i)+".>")
		if err != nil {
			t.Fatalf("%s: batch: %v", f.name, err)
		}
		if len(msgs) != 3 || left != 0 {
			t.Fatalf("%s: batch: got %d messages and %d left, want the 3 stored and none left", f.name, len(msgs), left)
		}
		for k, m := range msgs {
			if m.Subject != subj || m.Sequence != seqs[k] {
				t.Errorf("%s: batch message %d: on %s at %d, want %s at %d", f.name, k, m.Subject, m.Sequence, subj, seqs[k])
			}
		}
		if string(msgs[0].Data) != "before" || string(msgs[2].Data) != "after" {
			t.Errorf("%s: the plain messages read %q and %q", f.name, msgs[0].Data, msgs[2].Data)
		}
		if got := msgs[1]; len(got.Data) != 0 || len(got.Header) != len(servedHeaders) {
			t.Errorf("%s: forged message served with body %q and headers %v, want no body and the server's %d headers", f.name, got.Data, got.Header, len(servedHeaders))
		}
		if _, err := b.GetSeq(ctx, "$JS.API.", "S", seqs[1]); !errors.Is(err, ErrForgedHeader) {
			t.Errorf("%s: GetSeq: got %v, want ErrForgedHeader", f.name, err)
		}
		for _, k := range []int{0, 2} {
			m, err := b.GetSeq(ctx, "$JS.API.", "S", seqs[k])
			if err != nil || m.Subject != subj || m.Sequence != seqs[k] {
				t.Errorf("%s: GetSeq(%d): %+v, %v", f.name, seqs[k], m, err)
			}
		}
	}
	if believed == 0 {
		t.Errorf("the JetStream client believed none of %d forgeries: the stored headers no longer come first, and this test no longer shows what it guards against", len(forgeries))
	}
	if m, err := b.GetLast(ctx, "$JS.API.", "S", "s.none.>"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("GetLast of no message: %+v, %v; want ErrMsgNotFound", m, err)
	}
	if m, err := b.GetSeq(ctx, "$JS.API.", "S", 10_000); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("GetSeq past the end: %+v, %v; want ErrMsgNotFound", m, err)
	}
}
