package notify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config is what a notifier sends where. Log and Endpoints are required.
type Config struct {
	// Log is the runs log. The notifier's NATS user needs the consumer
	// API on the runs streams (the worker user has it; the operator user
	// does not).
	Log       *events.Log
	Endpoints []Endpoint
	// Durable names the consumers notifiers share ("<Durable>_<k>" on
	// shard k). Every notifier that must not repeat another's notices
	// uses the same name. Default "arbiter_notify".
	Durable string
	// ConsoleURL is the console's base address with its path, as
	// `arbiter console` prints it (http://127.0.0.1:7788/c/…, see
	// console.Server.Path); each notice links to the run's page under it.
	// Empty: no link.
	ConsoleURL string
	// Attempts bounds the posts of one notice to one endpoint. Default 6.
	Attempts int
	// Backoff is the wait after the first failed attempt; it doubles after
	// each, up to half the consumer's ack wait (15s), so the request
	// never passes to another notifier while this one retries. Default 500ms.
	Backoff time.Duration
	// Client posts the notices. Default: a client with a 10s timeout.
	Client *http.Client
	// Report is told of what the notifier gave up on (a notice no endpoint
	// took after its attempts, an event it cannot read), and goes on.
	// Default: nothing is told.
	Report func(error)
}

func (c Config) withDefaults() Config {
	if c.Durable == "" {
		c.Durable = layout.NotifyConsumer
	}
	if c.Attempts == 0 {
		c.Attempts = 6
	}
	if c.Backoff == 0 {
		c.Backoff = 500 * time.Millisecond
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if c.Report == nil {
		c.Report = func(error) {}
	}
	return c
}

// Validate reports a configuration that cannot work, naming the field.
func (c Config) Validate() error {
	if c.Log == nil {
		return errors.New("notify config: no Log")
	}
	if len(c.Endpoints) == 0 {
		return errors.New("notify config: no endpoints")
	}
	for _, e := range c.Endpoints {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("notify config: %w", err)
		}
	}
	if c.Attempts < 0 || c.Backoff < 0 {
		return fmt.Errorf("notify config: negative attempts %d or backoff %s", c.Attempts, c.Backoff)
	}
	return nil
}

// Notifier follows approval requests and posts a notice of each.
type Notifier struct{ cfg Config }

// New returns a notifier for cfg. It does no I/O.
func New(cfg Config) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Notifier{cfg: cfg.withDefaults()}, nil
}

// ackWait is how long a notice may go unacknowledged before its request is
// given to another notifier; a notifier retrying an endpoint says it is
// still at work well within it.
const ackWait = 30 * time.Second

// ConsumerConfig is the durable consumer notifiers named durable share on
// shard k's stream ("<durable>_<k>"; the default name when durable is
// empty): every approval request, a step's ([events.ApprovalRequested]) and
// a model budget's ([events.ApprovalBudget]), acknowledged once noticed.
// The administrator's setup creates it for the default name.
func ConsumerConfig(log *events.Log, k int, durable string) jetstream.ConsumerConfig {
	if durable == "" {
		durable = layout.NotifyConsumer
	}
	return jetstream.ConsumerConfig{
		Durable:        layout.ShardConsumer(durable, k),
		FilterSubjects: notifiedKinds(log, k),
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        ackWait,
		MaxDeliver:     -1,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
}

// notifiedKinds are the subject filters of the kinds a notice is sent for
// on shard k.
func notifiedKinds(log *events.Log, k int) []string {
	return []string{log.KindFilter(k, events.ApprovalRequested), log.KindFilter(k, events.ApprovalBudget)}
}

// Run follows every shard until ctx is done (nil) or a shard's consumer
// fails (its error).
func (n *Notifier) Run(ctx context.Context) error {
	log := n.cfg.Log
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, log.Config().Shards)
	inbox, err := jsinbox.For(log.JetStream().Conn())
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	for k := range log.Config().Shards {
		stream := log.StreamName(k)
		cc := ConsumerConfig(log, k, n.cfg.Durable)
		// The administrator's setup makes the consumers (workers may not);
		// where nobody did and this user may, the notifier makes them.
		cons, err := log.JetStream().Consumer(ctx, stream, cc.Durable)
		switch {
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			cons, err = log.JetStream().CreateOrUpdateConsumer(ctx, stream, cc)
		case err == nil && !slices.Equal(filters(cons.CachedInfo().Config), cc.FilterSubjects):
			// A consumer made by an older setup follows fewer kinds (the
			// step approvals only): bring it up to date where this user
			// may, rather than miss the budget approvals unseen.
			had := filters(cons.CachedInfo().Config)
			if cons, err = log.JetStream().UpdateConsumer(ctx, stream, cc); err != nil {
				return fmt.Errorf("notify: consumer %s on %s follows %v, not %v, and this user may not update it (run arbiter setup again): %w", cc.Durable, stream, had, cc.FilterSubjects, err)
			}
		}
		if err != nil {
			return fmt.Errorf("notify: consumer %s on %s (arbiter setup makes it): %w", cc.Durable, stream, err)
		}
		go func() { errc <- n.follow(ctx, inbox, stream, cc.Durable) }()
	}
	var first error
	for range log.Config().Shards {
		if err := <-errc; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

// filters are the subjects consumer config c follows.
func filters(c jetstream.ConsumerConfig) []string {
	if c.FilterSubject != "" {
		return []string{c.FilterSubject}
	}
	return c.FilterSubjects
}

// follow takes the approval requests of stream's consumer one at a time.
// It pulls with jsinbox, not the client's Next: a message is a delivery
// by its ack subject, never taken for a status of the server's by its
// headers, so a stored message claiming "409 Consumer Deleted" is an
// approval event to judge (and refuse), not the end of this notifier.
func (n *Notifier) follow(ctx context.Context, inbox *jsinbox.Inbox, stream, consumer string) error {
	prefix := jsinbox.APIPrefix(n.cfg.Log.JetStream())
	for {
		var m *jsinbox.Delivery
		pull, err := inbox.Pull(ctx, prefix, stream, consumer, 1, time.Second)
		if err == nil {
			// To the pull's end even once ctx is done (at most a second):
			// a delivery nobody reads would wait out its ack wait; one
			// that comes after ctx is done is handed back below.
			m, err = pull.Next(context.WithoutCancel(ctx))
			pull.Close()
		}
		switch {
		case ctx.Err() != nil:
			if m != nil {
				_ = m.Nak()
			}
			return nil
		case errors.Is(err, io.EOF) || errors.Is(err, nats.ErrTimeout):
			continue
		case errors.Is(err, nats.ErrNoResponders):
			// JetStream did not answer this pull (it is busy, or
			// electing a leader): ask again shortly, as after a timeout.
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		case err != nil:
			return fmt.Errorf("notify: read %s: %w", stream, err)
		}
		if err := n.handle(ctx, m); err != nil {
			if ctx.Err() != nil {
				// Stopped mid-delivery: another notifier (or this one
				// restarted) sends it.
				_ = m.Nak()
				return nil
			}
			n.cfg.Report(err)
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = m.DoubleAck(actx)
		cancel()
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("notify: ack on %s: %w", stream, err)
		}
	}
}

// handle sends the notice of one approval request (a step's or a model
// budget's), unless its approval no longer waits (it was decided or expired before this
// notifier got to it, or the notifier started after).
func (n *Notifier) handle(ctx context.Context, m *jsinbox.Delivery) error {
	e, err := events.Decode(m.Data())
	if err == nil {
		err = n.cfg.Log.CheckStored(m.Subject(), m.Headers(), e)
	}
	if err != nil {
		return fmt.Errorf("notify: message on %s: %w", m.Subject(), err)
	}
	id, err := requested(e)
	if err != nil {
		return fmt.Errorf("notify: run %s event %s: %w", e.Run, e.ID, err)
	}
	recs, _, err := n.cfg.Log.Read(ctx, e.Run)
	if err != nil {
		return fmt.Errorf("notify: read run %s: %w", e.Run, err)
	}
	evs := make([]events.Event, len(recs))
	for i, r := range recs {
		evs[i] = r.Event
	}
	v, err := projector.Fold(evs...)
	if err != nil {
		return fmt.Errorf("notify: run %s does not fold: %w", e.Run, err)
	}
	a := v.Approval(id)
	if a == nil || a.State != projector.Pending || v.Run.Status != projector.Waiting {
		return nil
	}
	notice := Notice{Delivery: a.ID, Run: e.Run, Approval: a.ID, Kind: a.Kind, Tool: a.Tool, Reason: a.Reason, Hash: a.Hash, Time: a.Requested, Expires: a.ExpiresAt}
	if n.cfg.ConsoleURL != "" {
		notice.URL = n.cfg.ConsoleURL + "/runs/" + e.Run
	}
	var errs []error
	for _, ep := range n.cfg.Endpoints {
		if err := n.deliver(ctx, m, ep, notice); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// requested is the id of the approval event e requests.
func requested(e events.Event) (string, error) {
	switch e.Kind {
	case events.ApprovalRequested:
		b, err := events.DecodeBody[events.PolicyBody](e)
		if err != nil || b.Approval == nil {
			return "", fmt.Errorf("no approval request in it (%v)", err)
		}
		return b.Approval.ID, nil
	case events.ApprovalBudget:
		b, err := events.DecodeBody[events.BudgetBody](e)
		if err != nil || b.Approval.ID == "" {
			return "", fmt.Errorf("no budget approval request in it (%v)", err)
		}
		return b.Approval.ID, nil
	}
	return "", fmt.Errorf("kind %s requests no approval", e.Kind)
}

// deliver posts notice to ep, retrying with a doubling wait, and tells the
// server the message is still in hand between attempts.
func (n *Notifier) deliver(ctx context.Context, m *jsinbox.Delivery, ep Endpoint, notice Notice) error {
	data, err := body(ep, notice)
	if err != nil {
		return err
	}
	wait := n.cfg.Backoff
	var last error
	for attempt := 1; attempt <= n.cfg.Attempts; attempt++ {
		// A post under way is finished (within the client's timeout) even
		// when the notifier is stopping: cut short, the endpoint may have
		// taken the notice with nobody left to acknowledge it, and it
		// would be sent again.
		if last = post(context.WithoutCancel(ctx), n.cfg.Client, ep, notice, data, time.Now()); last == nil || errors.Is(last, ErrRefused) {
			break
		}
		if attempt == n.cfg.Attempts {
			break
		}
		_ = m.InProgress()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, ackWait/2)
	}
	if last != nil {
		return fmt.Errorf("notify: approval %s of run %s to %s: gave up: %w", notice.Approval, notice.Run, ep.Name, last)
	}
	return nil
}
