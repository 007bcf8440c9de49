// Package client is what an application or an operator's tool uses to work
// with runs that a fleet of workers drives: start a run (its input, actor
// and limits), wait for its result, read its view and events, list runs,
// decide an approval with an operator's key, cancel a run, and watch
// approvals and run ends.
//
// A Client never drives a run and never executes a tool: workers do
// ([fleet.Worker]). It writes a run only to create it (run.created) and to
// cancel it (run.cancelled), each one fenced append; an operator's
// decision is published on the decisions stream, where the worker that
// drives the run verifies and records it (ADR 0007), and the fleet is
// nudged. Every read is believed only whole: a run whose events do not
// verify or fold is [ErrBroken], never shown in part.
//
// The NATS user a client connects as decides what it may do (ADR 0008):
// the operator user reads, decides and nudges; starting and cancelling a
// run write run subjects, which only the worker user may.
package client

import (
	"context"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/nats-io/nats.go/jetstream"
)

// Client works with the runs of one log and the fleet's work queue. It is
// safe for concurrent use.
type Client struct {
	log  *events.Log
	q    *fleet.Queue
	poll time.Duration
}

// Config names the log and the fleet a client attaches to. The zero value
// is the defaults of both (the layout `arbiter setup` and the embedded
// worker create).
type Config struct {
	// Log is the runs log's layout; it must be the workers'.
	Log events.Config
	// Fleet names the work queue and the buckets.
	Fleet fleet.Config
	// Poll is how often [Client.Wait], [Client.WaitApproval] and the
	// watchers look again once they have read everything stored. Default
	// [DefaultPoll].
	Poll time.Duration
}

// DefaultPoll is how often a waiting client reads a run again: reads are
// direct gets, which an operator's NATS user may make, not subscriptions,
// which it may not (ADR 0008).
const DefaultPoll = 100 * time.Millisecond

// Validate reports a configuration that cannot work, naming the field.
func (c Config) Validate() error {
	if err := c.Log.Validate(); err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	if err := c.Fleet.Validate(); err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	if c.Poll < 0 {
		return fmt.Errorf("client config: poll %s is negative", c.Poll)
	}
	return nil
}

// New returns a client of log whose decisions and starts nudge q. It does
// no I/O. q may be nil for a client that only reads (its Start, Decide and
// Cancel then nudge nobody and say so).
func New(log *events.Log, q *fleet.Queue) *Client {
	return &Client{log: log, q: q, poll: DefaultPoll}
}

// Attach returns a client of the log and work queue that already exist on
// the server js reaches, creating nothing: what an application or an
// operator does. A server nobody set up is an error wrapping
// jetstream.ErrStreamNotFound: an administrator runs `arbiter setup`.
func Attach(ctx context.Context, js jetstream.JetStream, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log, err := events.Attach(ctx, js, cfg.Log)
	if err != nil {
		return nil, fmt.Errorf("attach client: %w (has the server been set up? `arbiter setup`)", err)
	}
	return withPoll(New(log, fleet.NewQueue(js, cfg.Fleet)), cfg.Poll), nil
}

// Setup creates or updates the runs streams, the decisions stream, the
// work queue and its buckets (idempotent), and returns a client of them:
// for a program that runs its own fleet in one process, with a NATS user
// allowed to set the server up. [fleet.Worker]s need the queue:
// [Client.Queue]; a worker that keeps snapshots of its views takes
// [fleet.NewSnapshots] over the bucket this creates.
func Setup(ctx context.Context, js jetstream.JetStream, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log, err := events.Open(ctx, js, cfg.Log)
	if err != nil {
		return nil, fmt.Errorf("set up client: %w", err)
	}
	q, _, err := fleet.Setup(ctx, js, cfg.Fleet)
	if err != nil {
		return nil, fmt.Errorf("set up client: %w", err)
	}
	return withPoll(New(log, q), cfg.Poll), nil
}

func withPoll(c *Client, poll time.Duration) *Client {
	if poll > 0 {
		c.poll = poll
	}
	return c
}

// Log returns the client's log.
func (c *Client) Log() *events.Log { return c.log }

// Queue returns the fleet's work queue (nil for a read-only client).
func (c *Client) Queue() *fleet.Queue { return c.q }

// pause waits d, or less when ctx ends first (then it returns ctx's error).
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WithPoll returns a copy of c that reads again every poll while it waits
// or watches (a poll of zero or less keeps c's).
func (c *Client) WithPoll(poll time.Duration) *Client {
	cp := *c
	return withPoll(&cp, poll)
}
