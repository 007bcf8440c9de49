package approvals

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/arbiter-run/arbiter/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Notice is one approval event as a subscriber sees it.
type Notice struct {
	Event     events.Event
	Subject   string
	Stream    string
	StreamSeq uint64
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
		go func() { errc <- consume(ctx, cons, stream, durable != "", fn) }()
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

func consume(ctx context.Context, cons jetstream.Consumer, stream string, ack bool, fn func(Notice) error) error {
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("watch approvals on %s: %w", stream, err)
	}
	defer it.Stop()
	go func() { <-ctx.Done(); it.Stop() }()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch approvals on %s: %w", stream, err)
		}
		ev, err := events.Decode(m.Data())
		if err != nil {
			return fmt.Errorf("watch approvals on %s: %w", stream, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("watch approvals on %s: %w", stream, err)
		}
		if err := fn(Notice{Event: ev, Subject: m.Subject(), Stream: stream, StreamSeq: md.Sequence.Stream}); err != nil {
			if ack {
				_ = m.Nak()
			}
			return err
		}
		if ack {
			if err := m.DoubleAck(ctx); err != nil && ctx.Err() == nil {
				return fmt.Errorf("watch approvals on %s: ack: %w", stream, err)
			}
		}
	}
}
