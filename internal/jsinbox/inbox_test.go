package jsinbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// serve starts an embedded server with JetStream in a temporary directory
// and returns a connection to it and its JetStream context.
func serve(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	_, nc := server(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// server starts an embedded server with JetStream in a temporary directory
// and returns it with a connection to it.
func server(t *testing.T) (*embedded.Server, *nats.Conn) {
	t.Helper()
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return srv, nc
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// served is a server with stream S (see stream), a connection to it, its
// JetStream context and the connection's inbox.
func served(t *testing.T) (*nats.Conn, context.Context, jetstream.JetStream, *Inbox) {
	t.Helper()
	nc, js := serve(t)
	ctx := ctxT(t)
	stream(t, ctx, js)
	b, err := For(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, ctx, js, b
}

// stream makes a stream S on "s.>" that allows direct gets.
func stream(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
}

// TestInbox_GoesWithItsConnection: a connection's inbox is dropped when the
// connection closes, and its waiters are told.
func TestInbox_GoesWithItsConnection(t *testing.T) {
	nc, ctx, js, b := served(t)
	if again, err := For(nc); err != nil || again != b {
		t.Fatalf("second For: %p, %v; want the same inbox %p", again, err, b)
	}
	nc.Close()
	select {
	case <-b.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("inbox not told of its connection's close in 10 s")
	}
	inboxes.Lock()
	_, held := inboxes.m[nc]
	inboxes.Unlock()
	if held {
		t.Error("a closed connection's inbox is still held")
	}
	if _, err := For(nc); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("inbox for a closed connection: got %v, want ErrConnectionClosed", err)
	}
	if _, err := b.Publish(&nats.Msg{Subject: "s.x", Data: []byte("x")}); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("publish on a closed connection: got %v, want ErrConnectionClosed", err)
	}
	if _, err := b.GetBatch(ctx, APIPrefix(js), "S", 1, 10, ""); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("batch get on a closed connection: got %v, want ErrConnectionClosed", err)
	}
}

// TestAck_Wait: a publish through the inbox is acknowledged with its
// stream sequence, a repeat of its message id is a duplicate of the same
// sequence, and a publish no stream takes is ErrNoStreamResponse after
// its retries.
func TestAck_Wait(t *testing.T) {
	_, ctx, _, b := served(t)
	for i, want := range []struct {
		seq uint64
		dup bool
	}{{1, false}, {1, true}} {
		a, err := b.Publish(&nats.Msg{Subject: "s.a", Data: []byte("x"), Header: nats.Header{jetstream.MsgIDHeader: {"one"}}})
		if err != nil {
			t.Fatal(err)
		}
		seq, dup, err := a.Wait(ctx)
		if err != nil || seq != want.seq || dup != want.dup {
			t.Fatalf("publish %d: seq %d, duplicate %v, %v; want %d, %v", i, seq, dup, err, want.seq, want.dup)
		}
		if a.Took() <= 0 {
			t.Errorf("publish %d: took %s, want the time to the ack", i, a.Took())
		}
	}
	a, err := b.Publish(&nats.Msg{Subject: "nowhere.a", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Wait(ctx); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("publish to no stream: got %v, want ErrNoStreamResponse", err)
	}
}

// TestGetBatch: a batch direct get returns the stored messages from a
// sequence on, in order, those of a subject only when asked, never more
// than asked for or than MaxBatch, and nothing past the end; a stream that
// is not there is an error.
func TestGetBatch(t *testing.T) {
	_, js := serve(t)
	ctx := ctxT(t)
	stream(t, ctx, js)
	const n = MaxBatch + 10
	for i := 1; i <= n; i++ {
		subj := "s.even"
		if i%2 == 1 {
			subj = "s.odd"
		}
		if _, err := js.Publish(ctx, subj, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name         string
		seq          uint64
		batch        int
		subject      string
		wantN        int
		wantFirstSeq uint64
		wantStep     uint64
	}{
		{"from the start", 1, 5, "", 5, 1, 1},
		{"from the middle", 100, 3, "", 3, 100, 1},
		{"one subject", 2, 4, "s.odd", 4, 3, 2},
		{"past the end", n + 1, 5, "", 0, 0, 0},
		{"near the end", n - 1, 5, "", 2, n - 1, 1},
		{"over MaxBatch", 1, MaxBatch + 5, "", MaxBatch, 1, 1},
		{"none asked", 1, 0, "", 0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msgs, err := GetBatch(ctx, js, "S", c.seq, c.batch, c.subject)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != c.wantN {
				t.Fatalf("got %d messages, want %d", len(msgs), c.wantN)
			}
			for i, m := range msgs {
				want := c.wantFirstSeq + uint64(i)*c.wantStep
				if m.Sequence != want || string(m.Data) != fmt.Sprint(want) || m.Time.IsZero() {
					t.Fatalf("message %d: seq %d data %q time %v, want seq %d", i, m.Sequence, m.Data, m.Time, want)
				}
				if c.subject != "" && m.Subject != c.subject {
					t.Fatalf("message %d on %s, want %s", i, m.Subject, c.subject)
				}
			}
		})
	}
	if _, err := GetBatch(ctx, js, "NOPE", 1, 5, ""); err == nil {
		t.Fatal("batch get from a stream that is not there: no error")
	}
}

// TestGetBatchPending: the count after a batch is how many matching
// messages the stream holds after the last one returned.
func TestGetBatchPending(t *testing.T) {
	nc, js := serve(t)
	ctx := ctxT(t)
	stream(t, ctx, js)
	for i := 1; i <= 10; i++ {
		subj := "s.a"
		if i%2 == 0 {
			subj = "s.b"
		}
		if _, err := js.Publish(ctx, subj, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := For(nc)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		seq         uint64
		batch       int
		subject     string
		wantN       int
		wantPending uint64
	}{
		{1, 1, "s.a", 1, 4},    // 1; 3, 5, 7, 9 left
		{4, 2, "s.a", 2, 1},    // 5, 7; 9 left
		{1, 5, "s.a", 5, 0},    // all of them
		{1, 3, "", 3, 7},       // every subject
		{10, 1, "s.b", 1, 0},   // the last
		{11, 1, "s.a", 0, 0},   // past the end
		{1, 1, "s.none", 0, 0}, // nothing on the subject
	}
	for _, c := range cases {
		msgs, pending, err := b.GetBatchPending(ctx, APIPrefix(js), "S", c.seq, c.batch, c.subject)
		if err != nil || len(msgs) != c.wantN || pending != c.wantPending {
			t.Errorf("from %d, %d of %q: %d messages, %d left, %v; want %d, %d left", c.seq, c.batch, c.subject, len(msgs), pending, err, c.wantN, c.wantPending)
		}
	}
}

// TestAPIPrefix: the prefix the batch get's subject starts with follows the
// JetStream context's prefix or domain.
func TestAPIPrefix(t *testing.T) {
	nc, _ := serve(t)
	for _, c := range []struct {
		name string
		js   func() (jetstream.JetStream, error)
		want string
	}{
		{"default", func() (jetstream.JetStream, error) { return jetstream.New(nc) }, "$JS.API."},
		{"domain", func() (jetstream.JetStream, error) { return jetstream.NewWithDomain(nc, "hub") }, "$JS.hub.API."},
		{"prefix", func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "$JS.leaf.API") }, "$JS.leaf.API."},
		{"prefix with its dot", func() (jetstream.JetStream, error) { return jetstream.NewWithAPIPrefix(nc, "$JS.leaf.API.") }, "$JS.leaf.API."},
	} {
		js, err := c.js()
		if err != nil {
			t.Fatal(err)
		}
		if got := APIPrefix(js); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

// TestInbox_OnlyTheExactTokenReachesItsWaiter publishes, from another
// client, replies on subjects that name a waiter's token otherwise
// than register wrote it (a leading zero, a sign, a suffix, another case,
// a number too large, nothing): none reaches the waiter, and the exact
// subject still does.
func TestInbox_OnlyTheExactTokenReachesItsWaiter(t *testing.T) {
	srv, nc := server(t)
	b, err := For(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The server has the inbox's subscription once a round trip is done:
	// another client's publish before that would reach nobody.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Another client of the server, publishing on the inbox's subjects.
	other, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	ch := make(chan reply, 16)
	// Skip ahead so the token has letters in base 36.
	b.mu.Lock()
	b.next = 36*36 + 10
	b.mu.Unlock()
	tok, subject := b.register(waiter{ch: ch, many: true})
	defer b.forget(tok)
	if want := b.base + "10b"; subject != want {
		t.Fatalf("reply subject %q, want %q", subject, want)
	}
	for _, s := range []string{"010b", "+10b", "10b0", "10B", "10b.x", "zzzzzzzzzzzzzzzzzzzz"} {
		if err := other.Publish(b.base+s, []byte("forged "+s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Publish(subject, []byte("real")); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-ch:
		if string(r.m.Data) != "real" {
			t.Fatalf("the waiter got %q (on %s)", r.m.Data, r.m.Subject)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the exact reply never arrived")
	}
	// The forged ones were published first, on the same connection, so
	// the server delivered them before the real one: nothing else is
	// queued once it has arrived.
	select {
	case r := <-ch:
		t.Fatalf("a second reply reached the waiter: %q (on %s)", r.m.Data, r.m.Subject)
	default:
	}
}

// TestAck_PublishIntoAfterAGiveUp: an Ack used again after a Wait that took
// its reply keeps its channel, and that reply sent again by another client
// is not taken for the next publish's; after a Wait that gave up it gets a
// fresh one, so a reply to the earlier publish that reached the old channel
// late cannot be taken for the next publish's.
func TestAck_PublishIntoAfterAGiveUp(t *testing.T) {
	srv, nc := server(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	stream(t, ctx, js)
	b, err := For(nc)
	if err != nil {
		t.Fatal(err)
	}
	other, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	var a Ack
	publish := func(data string) {
		t.Helper()
		if err := b.PublishInto(&a, &nats.Msg{Subject: "s.a", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	publish("1")
	if seq, _, err := a.Wait(ctx); err != nil || seq != 1 {
		t.Fatalf("first: seq %d, %v", seq, err)
	}
	ch, answered := a.ch, a.msg.Reply
	// The answered reply again, from another client of the server: its
	// token has no waiter any more, so it reaches nobody, and the reused
	// channel takes only the next publish's reply.
	if err := other.Publish(answered, []byte(`{"stream":"S","seq":777}`)); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	publish("2")
	if a.ch != ch {
		t.Fatal("an answered Ack's channel was not used again")
	}
	if seq, _, err := a.Wait(ctx); err != nil || seq != 2 {
		t.Fatalf("second: seq %d, %v; want 2 (777 is the first reply sent again)", seq, err)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	publish("3")
	if _, _, err := a.Wait(gone); !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait on a cancelled context: %v", err)
	}
	// The worst a late reply can do: be in the old channel already.
	select {
	case a.ch <- reply{m: &nats.Msg{Data: []byte(`{"stream":"S","seq":999}`)}, at: time.Now()}:
	default:
	}
	publish("4")
	seq, _, err := a.Wait(ctx)
	if err != nil || seq != 4 {
		t.Fatalf("after a give-up: seq %d, %v; want 4 (the stored message \"3\" is 3, the stale reply 999)", seq, err)
	}
}
