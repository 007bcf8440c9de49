package jsinbox

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPull_DeliveriesByTheirAckSubject: on a real consumer, a pull
// returns every stored message as a delivery, those whose headers claim a
// status of the server's ("409 Consumer Deleted", "408", "100") included,
// in order, settles them on their ack subject, and ends at its batch or
// at the server's expiry (io.EOF); a pull for more than the consumer
// takes ends with the server's 409 as ErrPullStatus.
func TestPull_DeliveriesByTheirAckSubject(t *testing.T) {
	nc, js := serve(t)
	ctx := ctxT(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "W", Subjects: []string{"w.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, "W", jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, MaxRequestBatch: 10}); err != nil {
		t.Fatal(err)
	}
	b, err := For(nc)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []*nats.Msg{
		{Subject: "w.a", Data: []byte("one")},
		{Subject: "w.b", Header: nats.Header{"Status": {"409"}, "Description": {"Consumer Deleted"}}},
		{Subject: "w.c", Header: nats.Header{"Status": {"408"}}},
		{Subject: "w.d", Header: nats.Header{"Status": {"100"}, "Description": {"Idle Heartbeat"}}},
		{Subject: "w.e", Data: []byte("five")},
	}
	for _, m := range msgs {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	read := func(batch int) (subjects []string, end error) {
		p, err := b.Pull(ctx, "$JS.API.", "W", "c", batch, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for {
			d, err := p.Next(ctx)
			if err != nil {
				return subjects, err
			}
			subjects = append(subjects, d.Subject())
			if d.NumDelivered() != 1 {
				t.Errorf("%s: delivered %d times, want 1", d.Subject(), d.NumDelivered())
			}
			if err := d.DoubleAck(ctx); err != nil {
				t.Errorf("ack %s: %v", d.Subject(), err)
			}
		}
	}
	got, end := read(3)
	if len(got) != 3 || got[0] != "w.a" || got[1] != "w.b" || got[2] != "w.c" || !errors.Is(end, io.EOF) {
		t.Errorf("first pull of 3: %v, then %v; want w.a w.b w.c, then io.EOF", got, end)
	}
	start := time.Now()
	got, end = read(5)
	if len(got) != 2 || got[0] != "w.d" || got[1] != "w.e" || !errors.Is(end, io.EOF) {
		t.Errorf("second pull of 5: %v, then %v; want w.d w.e, then io.EOF at the expiry", got, end)
	}
	if waited := time.Since(start); waited < 150*time.Millisecond {
		t.Errorf("a pull short of its batch ended after %s, before the server's expiry (200ms)", waited)
	}
	if _, end = read(11); !errors.Is(end, ErrPullStatus) {
		t.Errorf("a pull over the consumer's batch limit ended with %v, want ErrPullStatus", end)
	}
	if info, err := js.Stream(ctx, "W"); err != nil {
		t.Fatal(err)
	} else if st, err := info.Info(ctx); err != nil || st.State.Msgs != 0 {
		t.Errorf("work stream after every message was acked: %d left (%v)", st.State.Msgs, err)
	}
}
