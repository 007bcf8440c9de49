package events_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
)

// TestRead_InterleavedRunsInBatches: runs written round-robin read back
// whole, each in order and alone, through batch reads of exactly their
// events; a tail past the stored events is a broken chain, not a hang.
func TestRead_InterleavedRunsInBatches(t *testing.T) {
	const runs, per = 5, 40
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	tails := make([]events.Tail, runs)
	for i := range tails {
		tails[i] = startRun(t, ctx, l, fmt.Sprintf("r%d", i))
	}
	for n := 1; n < per; n++ {
		for i := range tails {
			run := fmt.Sprintf("r%d", i)
			tail, err := l.Append(ctx, tails[i], mustEvent(t, run, events.StepDecided, events.StepDecidedBody{Step: n, Tool: run}))
			if err != nil {
				t.Fatal(err)
			}
			tails[i] = tail
		}
	}
	for i := range tails {
		run := fmt.Sprintf("r%d", i)
		recs, tail, err := l.Read(ctx, run)
		if err != nil {
			t.Fatalf("read %s: %v", run, err)
		}
		if len(recs) != per || tail != tails[i] {
			t.Fatalf("read %s: %d events, tail %+v; want %d, %+v", run, len(recs), tail, per, tails[i])
		}
		for k, rec := range recs {
			if rec.Event.Run != run || rec.Event.Seq != uint64(k+1) {
				t.Fatalf("read %s: event %d is run %s position %d", run, k, rec.Event.Run, rec.Event.Seq)
			}
		}
		// From the middle, as a snapshot would.
		mid := recs[per/2-1].Tail()
		after, _, err := l.Since(ctx, run, mid)
		if err != nil || len(after) != per/2 {
			t.Fatalf("read %s after %d: %d events, %v; want %d", run, mid.Count, len(after), err, per/2)
		}
	}
	// A tail that claims more events than are stored.
	beyond := tails[0]
	beyond.Count += 3
	if _, _, err := l.Since(ctx, "r0", beyond); !errors.Is(err, events.ErrBrokenChain) {
		t.Fatalf("read past the stored events: got %v, want ErrBrokenChain", err)
	}
}

// TestRead_NoStream: a batch read from a stream that is gone is an error.
func TestRead_NoStream(t *testing.T) {
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	t0 := startRun(t, ctx, l, "r")
	if _, err := l.Append(ctx, t0, mustEvent(t, "r", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "x"})); err != nil {
		t.Fatal(err)
	}
	if err := env.JS.DeleteStream(ctx, l.StreamName(0)); err != nil {
		t.Fatal(err)
	}
	// Gone is not broken: the run is not refused for good.
	if _, _, err := l.Read(ctx, "r"); err == nil || errors.Is(err, events.ErrBrokenChain) || errors.Is(err, events.ErrNoRun) {
		t.Fatalf("read with no stream: got %v, want a transport error (not a broken chain, not no run)", err)
	}
}

// TestRead_LongRunInSeveralBatches: a run longer than one batch read (1,024
// events) reads back whole and in order.
func TestRead_LongRunInSeveralBatches(t *testing.T) {
	const n = 1100
	ctx := ctxT(t)
	l := testkit.JetStream(t).Log(t, events.Config{})
	tail := startRun(t, ctx, l, "long")
	for i := 1; i < n; i++ {
		var err error
		if tail, err = l.Append(ctx, tail, mustEvent(t, "long", events.StepDecided, events.StepDecidedBody{Step: i, Tool: "x"})); err != nil {
			t.Fatal(err)
		}
	}
	recs, got, err := l.Read(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n || got != tail {
		t.Fatalf("read a run of %d: %d events, tail %+v, want %+v", n, len(recs), got, tail)
	}
	for i, r := range recs {
		if r.Event.Seq != uint64(i+1) {
			t.Fatalf("event %d at position %d", i, r.Event.Seq)
		}
	}
}

// TestRead_AsksOnlyForMessagesThatAreThere: a read from the start asks
// the server for the run's first message, then from the start again for
// exactly as many as the server says the run has, and on for as many as
// are left: never for more than the run has from where each read starts
// (in a stream of many subjects the server would scan to the stream's end
// looking for them), with no lookup of the run's last message. A run of
// one event costs one read. A read from a position held looks the last
// message up first: with nothing new, that is all. The requests are
// watched on the API subjects they are sent to.
func TestRead_AsksOnlyForMessagesThatAreThere(t *testing.T) {
	ctx := ctxT(t)
	env := testkit.JetStream(t)
	l := env.Log(t, events.Config{})
	type req struct {
		Seq    uint64 `json:"seq"`
		Batch  int    `json:"batch"`
		Subj   string `json:"next_by_subj"`
		Lookup bool   `json:"-"` // a lookup of the last message, not a batch
	}
	reqs := make(chan req, 64)
	watch, err := env.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close()
	// One subscription, so the requests come to it in the order they were
	// sent: a lookup of the last message by subject, direct or not, or a
	// batch read.
	stream := l.StreamName(0)
	sub, err := watch.Subscribe("$JS.API.>", func(m *nats.Msg) {
		if m.Subject != "$JS.API.DIRECT.GET."+stream && !strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET."+stream+".") && m.Subject != "$JS.API.STREAM.MSG.GET."+stream {
			return
		}
		var r req
		if len(m.Data) > 0 {
			if err := json.Unmarshal(m.Data, &r); err != nil {
				t.Errorf("get request %q: %v", m.Data, err)
			}
		}
		r.Lookup = r.Batch == 0
		reqs <- r
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	// reads returns the requests made by read, once a marker request
	// (a read of no run's subjects) shows every one before it arrived.
	reads := func(read func()) []req {
		t.Helper()
		read()
		if _, err := jsinbox.GetBatch(ctx, env.JS, l.StreamName(0), 1, 1, "marker.none"); err != nil {
			t.Fatal(err)
		}
		var got []req
		for r := range reqs {
			if r.Subj == "marker.none" {
				return got
			}
			got = append(got, r)
		}
		return nil
	}
	// Two runs written in turns, so each run's messages are apart.
	tails := map[string]events.Tail{"a": startRun(t, ctx, l, "a"), "b": startRun(t, ctx, l, "b"), "one": startRun(t, ctx, l, "one")}
	const per = 1100 // more than one batch
	for n := 1; n < per; n++ {
		for _, run := range []string{"a", "b"} {
			tail, err := l.Append(ctx, tails[run], mustEvent(t, run, events.StepDecided, events.StepDecidedBody{Step: n, Tool: "x"}))
			if err != nil {
				t.Fatal(err)
			}
			tails[run] = tail
		}
	}
	var recs, ones []events.Record
	reads(func() {
		if recs, _, err = l.Read(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if ones, _, err = l.Read(ctx, "one"); err != nil {
			t.Fatal(err)
		}
	})
	// left is how many of the run's messages the stream holds from seq on.
	left := func(subj string, seq uint64) int {
		n := 0
		for _, r := range append(append([]events.Record(nil), recs...), ones...) {
			if l.RunFilter(r.Event.Run) == subj && r.StreamSeq >= seq {
				n++
			}
		}
		return n
	}
	check := func(what string, got []req, wantLookups, wantBatches int) {
		t.Helper()
		lookups, batches := 0, 0
		for _, r := range got {
			if r.Lookup {
				lookups++
				continue
			}
			batches++
			if r.Subj != l.RunFilter("a") && r.Subj != l.RunFilter("one") {
				t.Fatalf("%s: a read of %q, not of the run's subjects", what, r.Subj)
			}
			if n := left(r.Subj, r.Seq); r.Batch > n {
				t.Fatalf("%s: asked for %d messages from stream seq %d, where the run has %d", what, r.Batch, r.Seq, n)
			}
		}
		if lookups != wantLookups || batches != wantBatches {
			t.Fatalf("%s: %d lookups and %d batch reads %+v, want %d and %d", what, lookups, batches, got, wantLookups, wantBatches)
		}
	}
	check("a whole run of 1,100", reads(func() {
		if got, tail, err := l.Read(ctx, "a"); err != nil || len(got) != per || tail != tails["a"] {
			t.Fatalf("read: %d events, tail %+v, %v; want %d, %+v", len(got), tail, err, per, tails["a"])
		}
	}), 0, 3) // the first message; 1,024 from the start; the 76 left
	check("a run of one event", reads(func() {
		if got, tail, err := l.Read(ctx, "one"); err != nil || len(got) != 1 || tail != tails["one"] {
			t.Fatalf("read: %d events, tail %+v, %v; want 1, %+v", len(got), tail, err, tails["one"])
		}
	}), 0, 1)
	check("nothing new since the tail", reads(func() {
		if got, tail, err := l.Since(ctx, "a", tails["a"]); err != nil || len(got) != 0 || tail != tails["a"] {
			t.Fatalf("since the tail: %d events, tail %+v, %v", len(got), tail, err)
		}
	}), 1, 0)
	mid := recs[per/2-1].Tail()
	check("from the middle", reads(func() {
		if got, tail, err := l.Since(ctx, "a", mid); err != nil || len(got) != per/2 || tail != tails["a"] {
			t.Fatalf("since the middle: %d events, tail %+v, %v; want %d", len(got), tail, err, per/2)
		}
	}), 1, 1)
}
