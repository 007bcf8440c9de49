package events_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestBegin_StoredBeforeWait: Begin publishes at once; the event is in the
// log before anyone waits for its ack, and Wait then returns the record
// Append would have.
func TestBegin_StoredBeforeWait(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	t0 := startRun(t, ctx, l, "r")
	ev := mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "x"})
	p, err := l.Begin(ctx, t0, ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Event(); got.Seq != t0.Count+1 || got.Prev != t0.Hash || got.ID != ev.ID {
		t.Fatalf("pending event: seq %d prev %q id %s, want seq %d prev %q id %s", got.Seq, got.Prev, got.ID, t0.Count+1, t0.Hash, ev.ID)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tail, err := l.Tail(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		if tail.Count == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("event not stored 10 s after Begin (tail %+v)", tail)
		}
	}
	rec, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	tail, err := l.Tail(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Tail() != tail || p.Tail() != tail {
		t.Errorf("record's tail %+v, pending's %+v, log's %+v", rec.Tail(), p.Tail(), tail)
	}
	if p.Took() <= 0 {
		t.Errorf("Took: %s, want the time to the ack", p.Took())
	}
}

// TestBegin_AcksReachTheirOwnWaiter: many appends in flight at once, on
// many runs, waited for in the reverse order: each Wait gets its own
// append's ack, so every tail is the one the log holds.
func TestBegin_AcksReachTheirOwnWaiter(t *testing.T) {
	const runs = 64
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	tails := make([]events.Tail, runs)
	for i := range tails {
		tails[i] = startRun(t, ctx, l, fmt.Sprintf("r%d", i))
	}
	var mu sync.Mutex
	ps := make([]*events.Pending, runs)
	var wg sync.WaitGroup
	for i := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ev, err := events.New(fmt.Sprintf("r%d", i), events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "x"})
			if err == nil {
				var p *events.Pending
				p, err = l.Begin(ctx, tails[i], ev)
				mu.Lock()
				ps[i] = p
				mu.Unlock()
			}
			if err != nil {
				t.Errorf("begin r%d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	for i := runs - 1; i >= 0; i-- {
		if ps[i] == nil {
			continue
		}
		rec, err := ps[i].Wait(ctx)
		if err != nil {
			t.Fatalf("wait r%d: %v", i, err)
		}
		want, err := l.Tail(ctx, fmt.Sprintf("r%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if rec.Event.Run != fmt.Sprintf("r%d", i) || rec.Tail() != want {
			t.Errorf("r%d: record of run %s tail %+v, log says %+v", i, rec.Event.Run, rec.Tail(), want)
		}
	}
}

// TestBegin_ConflictAtWait: a fence that no longer holds is found out at
// Wait, as ErrConflict.
func TestBegin_ConflictAtWait(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	t0 := startRun(t, ctx, l, "r")
	if _, err := l.Append(ctx, t0, mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "first"})); err != nil {
		t.Fatal(err)
	}
	p, err := l.Begin(ctx, t0, mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "late"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("wait on a stale tail: got %v, want ErrConflict", err)
	}
}

// beginWithNoStream starts run "r", deletes the log's stream and begins an
// append to the run.
func beginWithNoStream(t *testing.T, ctx context.Context) (*testkit.JS, *events.Log, events.Tail, *events.Pending) {
	t.Helper()
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	t0 := startRun(t, ctx, l, "r")
	if err := env.JS.DeleteStream(ctx, l.StreamName(0)); err != nil {
		t.Fatal(err)
	}
	p, err := l.Begin(ctx, t0, mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "x"}))
	if err != nil {
		t.Fatal(err)
	}
	return env, l, t0, p
}

// TestWait_ConnectionClosed: an ack cannot come on a closed connection, and
// Wait says so at once (ErrConnectionClosed, not its 5 s timeout, nor the
// retries after "no responders"); Begin on a closed connection is refused.
func TestWait_ConnectionClosed(t *testing.T) {
	ctx := ctxT(t)
	// With no stream the reply is "no responders", so no ack can race the
	// close: Wait is waiting to publish again when the connection goes.
	env, l, t0, p := beginWithNoStream(t, ctx)
	env.Conn.Close()
	if _, err := p.Wait(context.Background()); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("wait with the connection closed: got %v, want an error wrapping nats.ErrConnectionClosed", err)
	}
	if _, err := l.Begin(ctx, t0, mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "y"})); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("Begin on a closed connection: got %v, want an error wrapping nats.ErrConnectionClosed", err)
	}
}

// TestWait_NoStream: with no stream to take the event, the publish is
// retried ("no responders" while a leader is elected), then refused with
// ErrNoStreamResponse.
func TestWait_NoStream(t *testing.T) {
	ctx := ctxT(t)
	_, _, _, p := beginWithNoStream(t, ctx)
	if _, err := p.Wait(ctx); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("append with no stream: got %v, want ErrNoStreamResponse", err)
	}
}

// TestWait_CancelledThenLateAck: a Wait cut short reports its context's
// error; the ack that comes later is dropped, and the log goes on taking
// appends. An ack may be in before the Wait looks (a fast server): the
// Wait may then take it, which is no error, and the case is tried again on
// another run, up to 20 times, until the wait is cut short before it.
func TestWait_CancelledThenLateAck(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	for try := 0; ; try++ {
		if try == 20 {
			t.Fatal("20 waits with a cancelled context all took their ack: none was cut short")
		}
		run := fmt.Sprintf("r%d", try)
		t0 := startRun(t, ctx, l, run)
		p, err := l.Begin(ctx, t0, mustEvent(t, run, events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "x"}))
		if err != nil {
			t.Fatal(err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, werr := p.Wait(cancelled)
		if werr != nil && !errors.Is(werr, context.Canceled) {
			t.Fatalf("wait with a cancelled context: got %v, want context.Canceled", werr)
		}
		// The event was published: it is stored whatever the waiter did.
		var tail events.Tail
		for deadline := time.Now().Add(10 * time.Second); tail.Count != 2; time.Sleep(time.Millisecond) {
			if tail, err = l.Tail(ctx, run); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("tail 10 s after the cancelled wait: %+v, want the event stored", tail)
			}
		}
		if _, err := l.Append(ctx, tail, mustEvent(t, run, events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult})); err != nil {
			t.Fatalf("append after a cancelled wait: %v", err)
		}
		if werr != nil {
			return // cut short, and the log went on
		}
	}
}

// TestBegin_LogsShareTheirConnectionsAckSubscription: however many logs are
// opened on a connection, their appends' acks come back on one
// subscription.
func TestBegin_LogsShareTheirConnectionsAckSubscription(t *testing.T) {
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	first := env.Log(t, events.Config{})
	startRun(t, ctx, first, "r0")
	subs := env.Conn.NumSubscriptions()
	for i := 1; i <= 20; i++ {
		l, err := events.Attach(ctx, env.JS, events.Config{})
		if err != nil {
			t.Fatal(err)
		}
		startRun(t, ctx, l, fmt.Sprintf("r%d", i))
	}
	if got := env.Conn.NumSubscriptions(); got != subs {
		t.Errorf("subscriptions after appending through 20 more logs: %d, want still %d", got, subs)
	}
}

// TestWait_AnotherMessageUnderTheEventsID: when the stream already holds a
// different message under the event's id (here, on another run), the
// server acks the append as a duplicate without storing it. That is no
// success: Wait says conflict, and the run is as it was.
func TestWait_AnotherMessageUnderTheEventsID(t *testing.T) {
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	t0 := startRun(t, ctx, l, "r")
	startRun(t, ctx, l, "other")
	ev := mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "x"})
	if _, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: l.Subject("other", events.StepObserved), Data: []byte(`{"impostor":true}`)}, jetstream.WithMsgID(ev.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, t0, ev); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("append under an id the stream holds for another message: got %v, want ErrConflict", err)
	}
	tail, err := l.Tail(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if tail != t0 {
		t.Errorf("run's tail after the refused append: %+v, want still %+v", tail, t0)
	}
}

// TestBegin_ClosedConnection: an append on a log whose connection has
// closed is refused at once with ErrConnectionClosed, never left waiting.
func TestBegin_ClosedConnection(t *testing.T) {
	ctx := ctxT(t)
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := events.Open(ctx, js, events.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := startRun(t, ctx, l, "r")
	nc.Close()
	ev := mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "x"})
	if _, err := l.Begin(ctx, t0, ev); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("append on a closed connection: got %v, want ErrConnectionClosed", err)
	}
}

// TestBeginReusing_OnePendingForARunsAppends: one Pending carries a run's
// appends one after the other, each stored whole with its own id and
// fence: the records read back are the ones appended, a fence on an old
// tail is still a conflict, and the record an earlier Wait returned keeps
// its bytes.
func TestBeginReusing_OnePendingForARunsAppends(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	tail := startRun(t, ctx, l, "r")
	var p *events.Pending
	var kept []events.Record
	for i := 1; i <= 20; i++ {
		ev := mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: i, Tool: fmt.Sprintf("tool-%d", i)})
		var err error
		before := p
		if p, err = l.BeginReusing(ctx, p, tail, ev); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if before != nil && p != before {
			t.Fatalf("append %d: a new Pending, not the spare", i)
		}
		rec, err := p.Wait(ctx)
		if err != nil {
			t.Fatalf("append %d: wait: %v", i, err)
		}
		kept = append(kept, rec) // its bytes, compared with the stream's below
		tail = p.Tail()
	}
	recs, _, err := l.Read(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 21 {
		t.Fatalf("%d events stored, want 21", len(recs))
	}
	for i, rec := range recs[1:] {
		if rec.Event.ID != kept[i].Event.ID || !bytes.Equal(rec.Data, kept[i].Data) {
			t.Fatalf("event %d: stored %s %q, the append's record says %s %q", i+1, rec.Event.ID, rec.Data, kept[i].Event.ID, kept[i].Data)
		}
	}
	stale := events.Tail{Seq: recs[3].StreamSeq, Count: recs[3].Event.Seq, Hash: recs[3].Tail().Hash}
	p, err = l.BeginReusing(ctx, p, stale, mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 99, Tool: "late"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("an append fenced on an old tail, from a reused Pending: %v, want ErrConflict", err)
	}
}

// TestBeginReusing_SubjectsFollowTheRunAndKind: a Pending used for appends
// of several kinds, and then for another run, puts each event on its own
// run's and kind's subject (Read refuses an event on another's), fenced on
// its own run (a fence on the other run's subjects would be a conflict).
func TestBeginReusing_SubjectsFollowTheRunAndKind(t *testing.T) {
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	tails := map[string]events.Tail{"a": startRun(t, ctx, l, "a"), "b": startRun(t, ctx, l, "b")}
	var p *events.Pending
	for i, c := range []struct {
		run  string
		kind events.Kind
		body any
	}{
		{"a", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "x"}},
		{"a", events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "1"}},
		{"a", events.StepDecided, events.StepDecidedBody{Step: 2, Tool: "x"}},
		{"a", events.StepObserved, events.ObservedBody{Step: 2, Kind: events.ObsResult, Content: "2"}},
		{"b", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "y"}},
		{"a", events.StepDecided, events.StepDecidedBody{Step: 3, Tool: "x"}},
		{"b", events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "b1"}},
	} {
		var err error
		if p, err = l.BeginReusing(ctx, p, tails[c.run], mustEvent(t, c.run, c.kind, c.body)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatalf("append %d (%s to %s): %v", i, c.kind, c.run, err)
		}
		tails[c.run] = p.Tail()
	}
	for run, n := range map[string]int{"a": 6, "b": 3} {
		recs, _, err := l.Read(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != n {
			t.Fatalf("run %s: %d events, want %d", run, len(recs), n)
		}
	}
}
