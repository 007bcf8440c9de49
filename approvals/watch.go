package approvals

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Notice is one approval event as a subscriber sees it.
type Notice struct {
	Event     events.Event
	Subject   string
	Stream    string
	StreamSeq uint64
	// Err is set when the stored message cannot be trusted: it does not
	// decode, or it is stored on a subject its kind does not belong on
	// (see [events.Log.CheckSubject]). Report it; never act on it.
	Err error
}

// Watch calls fn for every approval event of every run (requested, granted,
// denied, expired, refused), in order per shard, until ctx is done or fn
// returns an error.
//
// With a durable name, the subscription is a durable consumer per shard
// ("<durable>_<k>"): a watcher started after an approval was requested still
// receives it, and one that restarts resumes after the last event it
// acknowledged, so each event is delivered once to a watcher that handled it
// (fn returned nil). Without one, Watch reads every approval event from the
// start of the log and keeps following.
func Watch(ctx context.Context, log *events.Log, durable string, fn func(Notice) error) error {
	js := log.JetStream()
	filters := log.ApprovalFilters()
	errc := make(chan error, len(filters))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for k, filter := range filters {
		stream := log.StreamName(k)
		var cons jetstream.Consumer
		var err error
		if durable == "" {
			cons, err = js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
		} else {
			cons, err = js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
				Durable: durable + "_" + strconv.Itoa(k), FilterSubject: filter,
				AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy, MaxDeliver: -1,
			})
		}
		if err != nil {
			return fmt.Errorf("watch approvals on %s: %w", stream, err)
		}
		go func() { errc <- consume(ctx, log, cons, stream, durable != "", fn) }()
	}
	for range filters {
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
			cancel()
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

func consume(ctx context.Context, log *events.Log, cons jetstream.Consumer, stream string, durable bool, fn func(Notice) error) error {
	next := func() (jetstream.Msg, error) { return cons.Next(jetstream.FetchMaxWait(time.Second)) }
	if !durable {
		it, err := cons.Messages()
		if err != nil {
			return fmt.Errorf("watch approvals on %s: %w", stream, err)
		}
		defer it.Stop()
		go func() { <-ctx.Done(); it.Stop() }()
		next = func() (jetstream.Msg, error) { return it.Next() }
	}
	for {
		// A durable watcher takes one message at a time, so a message its
		// handler refused is redelivered at once, not after AckWait.
		m, err := next()
		switch {
		case ctx.Err() != nil:
			return nil
		case durable && errors.Is(err, nats.ErrTimeout):
			continue
		case err != nil:
			return fmt.Errorf("watch approvals on %s: %w", stream, err)
		}
		n := notice(log, m, stream)
		if err := fn(n); err != nil {
			if durable {
				_ = m.Nak()
			}
			return err
		}
		if durable {
			// Ack even when fn has just cancelled the watch: the event was
			// handled.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			err := m.DoubleAck(actx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("watch approvals on %s: ack: %w", stream, err)
			}
		}
	}
}

func notice(log *events.Log, m jetstream.Msg, stream string) Notice {
	n := Notice{Subject: m.Subject(), Stream: stream}
	if md, err := m.Metadata(); err == nil {
		n.StreamSeq = md.Sequence.Stream
	}
	ev, err := events.Decode(m.Data())
	if err == nil {
		err = log.CheckSubject(m.Subject(), ev)
	}
	n.Event, n.Err = ev, err
	return n
}
