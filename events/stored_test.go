package events_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRead_BelievesOnlyWhatTheServerStored stores, after a run of five
// events, one message that claims to be (or to end) the run in a way only
// the server or an append may say it:
//
//   - headers of the server's own on a stored message (jsinbox.ErrForgedHeader):
//     an end of batch that would hide garbage after it, a "not found", a
//     copy of event 3 claiming its stream sequence (a rollback), an event
//     on a sibling subject claiming the run's own;
//   - the exact bytes of a valid next event without an append's message id,
//     as a JetStream API reply relayed onto the run's subject carries them
//     (a direct get with no headers, whose reply subject any user names),
//     or under another message id.
//
// None may be believed: Read, Tail and Since from every tail the run had
// fail as a broken chain, and none returns a run shorter or other than
// what was appended. The same stores without the forged part are read as
// the run's (the check is not a refusal of everything new).
func TestRead_BelievesOnlyWhatTheServerStored(t *testing.T) {
	type build func(t *testing.T, l *events.Log, recs []events.Record, tails []events.Tail) *nats.Msg
	next := func(t *testing.T, l *events.Log, tails []events.Tail) (events.Event, []byte) {
		ev := mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 5})
		ev.V, ev.Seq, ev.Prev = events.FormatVersion, tails[len(tails)-1].Count+1, tails[len(tails)-1].Hash
		data, err := ev.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return ev, data
	}
	for _, tc := range []struct {
		name string
		msg  build
		// plain is the same store made honestly, which must be believed
		// (nil: there is no honest form of it).
		plain build
	}{
		{"end of batch, then garbage", func(t *testing.T, l *events.Log, _ []events.Record, _ []events.Tail) *nats.Msg {
			return &nats.Msg{Subject: l.Subject("r", events.StepDecided), Header: nats.Header{"Status": {"204"}, "Nats-Num-Pending": {"0"}}}
		}, nil},
		{"not found", func(t *testing.T, l *events.Log, _ []events.Record, _ []events.Tail) *nats.Msg {
			return &nats.Msg{Subject: l.Subject("r", events.StepDecided), Header: nats.Header{"Status": {"404"}}}
		}, nil},
		{"a copy of event 3 at its sequence", func(t *testing.T, l *events.Log, recs []events.Record, _ []events.Tail) *nats.Msg {
			return &nats.Msg{Subject: l.Subject("r", recs[2].Event.Kind), Data: recs[2].Data, Header: nats.Header{
				jetstream.SequenceHeader: {strconv.FormatUint(recs[2].StreamSeq, 10)},
				jetstream.MsgIDHeader:    {recs[2].Event.ID},
			}}
		}, nil},
		{"the next event on a sibling subject", func(t *testing.T, l *events.Log, _ []events.Record, tails []events.Tail) *nats.Msg {
			ev, data := next(t, l, tails)
			return &nats.Msg{Subject: l.Subject("r", events.RunFinished) + ".x", Data: data, Header: nats.Header{
				jetstream.SubjectHeader: {l.Subject("r", ev.Kind)},
				jetstream.MsgIDHeader:   {ev.ID},
			}}
		}, nil},
		{"the next event, relayed with no headers", func(t *testing.T, l *events.Log, _ []events.Record, tails []events.Tail) *nats.Msg {
			ev, data := next(t, l, tails)
			return &nats.Msg{Subject: l.Subject("r", ev.Kind), Data: data}
		}, func(t *testing.T, l *events.Log, _ []events.Record, tails []events.Tail) *nats.Msg {
			ev, data := next(t, l, tails)
			return &nats.Msg{Subject: l.Subject("r", ev.Kind), Data: data, Header: nats.Header{jetstream.MsgIDHeader: {ev.ID}}}
		}},
		{"the next event under another message id", func(t *testing.T, l *events.Log, _ []events.Record, tails []events.Tail) *nats.Msg {
			ev, data := next(t, l, tails)
			return &nats.Msg{Subject: l.Subject("r", ev.Kind), Data: data, Header: nats.Header{jetstream.MsgIDHeader: {events.NewID()}}}
		}, nil},
	} {
		for _, forged := range []bool{true, false} {
			b := tc.msg
			if !forged {
				if tc.plain == nil {
					continue
				}
				b = tc.plain
			}
			t.Run(tc.name+map[bool]string{true: "", false: ", made honestly"}[forged], func(t *testing.T) {
				ctx := ctxT(t)
				env := testkit.JetStream(t)
				l := env.Log(t, events.Config{})
				tails := fiveEvents(t, ctx, l, "r")
				recs, _, err := l.Read(ctx, "r")
				if err != nil || len(recs) != 5 {
					t.Fatalf("read before: %d events, %v", len(recs), err)
				}
				if _, err := env.JS.PublishMsg(ctx, b(t, l, recs, tails)); err != nil {
					t.Fatal(err)
				}
				// Garbage after the forgery: a read that stops at a fake
				// end would call the run whole without it.
				if forged {
					if _, err := env.JS.Publish(ctx, l.Subject("r", events.StepObserved), []byte("garbage")); err != nil {
						t.Fatal(err)
					}
				}
				check := func(what string, n int, tail events.Tail, err error) {
					t.Helper()
					switch {
					case forged && !errors.Is(err, events.ErrBrokenChain) && !errors.Is(err, events.ErrMalformed):
						t.Errorf("%s: %d events, tail %+v, err %v; want the run refused", what, n, tail, err)
					case !forged && (err != nil || tail.Count != 6):
						t.Errorf("%s of the honest store: %d events, tail %+v, err %v; want the run's 6 events", what, n, tail, err)
					}
				}
				recs, tail, err := l.Read(ctx, "r")
				check("Read", len(recs), tail, err)
				tail, err = l.Tail(ctx, "r")
				check("Tail", -1, tail, err)
				for _, from := range tails {
					recs, tail, err := l.Since(ctx, "r", from)
					check("Since position "+strconv.FormatUint(from.Count, 10), len(recs), tail, err)
				}
				if forged {
					scanned := 0
					err := l.Scan(context.WithoutCancel(ctx), 0, 1, func(r events.RawRecord) error {
						e, derr := events.Decode(r.Data)
						if derr == nil && l.CheckStored(r.Subject, r.Header, e) == nil {
							scanned++
						}
						return nil
					})
					if err != nil || scanned != 5 {
						t.Errorf("a scan believed %d messages (err %v), want the 5 appended", scanned, err)
					}
				}
			})
		}
	}
}
