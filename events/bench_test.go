package events_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// benchEventSize is the size of the stored events the benchmarks append,
// as in the design's measurements.
const benchEventSize = 450

// benchRuns numbers the runs benchmarks create, so that every invocation of
// a benchmark function (b.N grows between them) starts a fresh run.
var benchRuns atomic.Int64

// benchCtx bounds a benchmark's I/O. It is longer than ctxT's minute:
// 2,000 reads of a run spread over a 50,000-event stream take about that.
func benchCtx(b *testing.B) context.Context {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

func benchRun(kind string) string {
	return fmt.Sprintf("bench-%s-%d", kind, benchRuns.Add(1))
}

// benchEvent returns a step.observed event of run whose encoded form, once
// Append has set its position and previous hash, is about size bytes.
func benchEvent(b *testing.B, run string, size int) events.Event {
	b.Helper()
	probe := mustEvent(b, run, events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult})
	probe.Seq, probe.Prev = 10000, strings.Repeat("0", 64)
	data, err := probe.Encode()
	if err != nil {
		b.Fatal(err)
	}
	pad := max(size-len(data), 0)
	return mustEvent(b, run, events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: strings.Repeat("x", pad)})
}

// eventsAppender appends through the log, one fenced Append per event,
// carrying the run's tail forward as a driver does. The events are built
// before the timer runs: what is timed is Append (envelope, encoding, hash,
// fenced publish), not building the body.
type eventsAppender struct {
	l    *events.Log
	run  string
	tail events.Tail
	evs  []events.Event
	next int
}

func newEventsAppender(b *testing.B, ctx context.Context, l *events.Log, n int) *eventsAppender {
	b.Helper()
	a := &eventsAppender{l: l, run: benchRun("events")}
	a.tail = startRun(b, ctx, l, a.run)
	tmpl := benchEvent(b, a.run, benchEventSize)
	a.evs = make([]events.Event, n)
	for i := range a.evs {
		e := tmpl
		e.ID = events.NewID()
		a.evs[i] = e
	}
	return a
}

func (a *eventsAppender) append(b *testing.B, ctx context.Context) {
	tail, err := a.l.Append(ctx, a.tail, a.evs[a.next])
	if err != nil {
		b.Fatalf("append %d: %v", a.next, err)
	}
	a.tail = tail
	a.next++
}

// bareAppender publishes the same pre-encoded bytes with the same fence and
// a unique message id, straight through JetStream: the floor Append is
// measured against.
type bareAppender struct {
	js      jetstream.JetStream
	subject string
	filter  string
	data    []byte
	ids     []string
	lastSeq uint64
	next    int
}

func newBareAppender(b *testing.B, ctx context.Context, l *events.Log, js jetstream.JetStream, n int) *bareAppender {
	b.Helper()
	run := benchRun("bare")
	a := &bareAppender{js: js, subject: l.Subject(run, events.StepObserved), filter: l.RunFilter(run)}
	tail := startRun(b, ctx, l, run)
	a.lastSeq = tail.Seq
	e := benchEvent(b, run, benchEventSize)
	e.Seq, e.Prev = tail.Count+1, tail.Hash
	data, err := e.Encode()
	if err != nil {
		b.Fatal(err)
	}
	a.data = data
	a.ids = make([]string, n)
	for i := range a.ids {
		a.ids[i] = events.NewID()
	}
	return a
}

func (a *bareAppender) append(b *testing.B, ctx context.Context) {
	ack, err := a.js.PublishMsg(ctx, &nats.Msg{Subject: a.subject, Data: a.data},
		jetstream.WithMsgID(a.ids[a.next]),
		jetstream.WithExpectLastSequenceForSubject(a.lastSeq, a.filter))
	if err != nil {
		b.Fatalf("bare publish %d: %v", a.next, err)
	}
	a.lastSeq = ack.Sequence
	a.next++
}

// BenchmarkAppend times one fenced append of a ~450-byte event to one run:
// through (*events.Log).Append, and as a bare JetStream publish of the same
// bytes with the same fence and a message id, against the same server.
func BenchmarkAppend(b *testing.B) {
	env := testkit.JetStream(b)
	l := env.Log(b, events.Config{})
	ctx := benchCtx(b)
	b.Run("events", func(b *testing.B) {
		a := newEventsAppender(b, ctx, l, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			a.append(b, ctx)
		}
	})
	b.Run("bare", func(b *testing.B) {
		a := newBareAppender(b, ctx, l, env.JS, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			a.append(b, ctx)
		}
		b.StopTimer()
		b.ReportMetric(float64(len(a.data)), "bytes/event")
	})
}

// BenchmarkAppendRatio times b.N appends through the log and b.N bare
// publishes, interleaved in blocks of 100 (the block that goes first
// alternating) so that noise on the machine hits both alike, and reports the
// ratio of their total times. The goal is at most 1.2 events/bare.
func BenchmarkAppendRatio(b *testing.B) {
	const block = 100
	env := testkit.JetStream(b)
	l := env.Log(b, events.Config{})
	ctx := benchCtx(b)
	ea := newEventsAppender(b, ctx, l, b.N)
	ba := newBareAppender(b, ctx, l, env.JS, b.N)
	var inEvents, inBare time.Duration
	timeBlock := func(n int, fn func(*testing.B, context.Context)) time.Duration {
		start := time.Now()
		for range n {
			fn(b, ctx)
		}
		return time.Since(start)
	}
	b.ResetTimer()
	for i, round := 0, 0; i < b.N; i, round = i+block, round+1 {
		n := min(block, b.N-i)
		if round%2 == 0 {
			inEvents += timeBlock(n, ea.append)
			inBare += timeBlock(n, ba.append)
		} else {
			inBare += timeBlock(n, ba.append)
			inEvents += timeBlock(n, ea.append)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(inEvents)/float64(inBare), "events/bare")
	b.ReportMetric(float64(inEvents.Nanoseconds())/float64(b.N), "events-ns/append")
	b.ReportMetric(float64(inBare.Nanoseconds())/float64(b.N), "bare-ns/append")
}

// BenchmarkReadRun50 times reading one run of 50 events with
// (*events.Log).Read (tail lookup, batch get, decoding, chain check): in a
// stream that holds just that run, and in one where 1,000 runs of 50 events
// were written round-robin, so the run spans the whole stream.
func BenchmarkReadRun50(b *testing.B) {
	const perRun = 50
	env := testkit.JetStream(b)
	ctx := benchCtx(b)

	alone := env.Log(b, events.Config{Stream: "BENCH_ALONE", Prefix: "bench.alone"})
	writeRuns(b, ctx, alone, []string{"alone"}, perRun)

	const runs = 1000
	inter := env.Log(b, events.Config{Stream: "BENCH_INTER", Prefix: "bench.inter"})
	ids := make([]string, runs)
	for i := range ids {
		ids[i] = fmt.Sprintf("run%04d", i)
	}
	start := time.Now()
	writeRuns(b, ctx, inter, ids, perRun)
	b.Logf("wrote %d runs of %d events round-robin in %s", runs, perRun, time.Since(start).Round(time.Millisecond))
	if recs, _, err := alone.Read(ctx, "alone"); err == nil {
		size := 0
		for _, r := range recs {
			size += len(r.Data)
		}
		b.Logf("a run of %d events holds %d bytes (%d per event)", len(recs), size, size/len(recs))
	}

	for _, tc := range []struct {
		name string
		l    *events.Log
		run  string
	}{
		{"alone", alone, "alone"},
		{"interleaved_1000", inter, ids[runs/2]},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				recs, _, err := tc.l.Read(ctx, tc.run)
				if err != nil {
					b.Fatalf("read %s: %v", tc.run, err)
				}
				if len(recs) != perRun {
					b.Fatalf("read %s: got %d events, want %d", tc.run, len(recs), perRun)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(perRun*b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// writeRuns appends n events to each of runs, round-robin: event i of every
// run, then event i+1 of every run.
func writeRuns(b *testing.B, ctx context.Context, l *events.Log, runs []string, n int) {
	b.Helper()
	tails := make([]events.Tail, len(runs))
	for i := range n {
		for r, run := range runs {
			ev := mustEvent(b, run, events.RunCreated, events.RunCreatedBody{Agent: "bench"})
			if i > 0 {
				ev = mustEvent(b, run, events.StepDecided, events.StepDecidedBody{Step: i, Tool: "read", Args: `{"path":"` + strings.Repeat("a", 200) + `"}`})
			}
			t, err := l.Append(ctx, tails[r], ev)
			if err != nil {
				b.Fatalf("append event %d of %s: %v", i+1, run, err)
			}
			tails[r] = t
		}
	}
}
