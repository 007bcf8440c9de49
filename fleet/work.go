// Package fleet owns how a fleet of workers shares runs: the work queue of
// nudges ([Queue]: a WorkQueue stream and one durable pull consumer shared
// by every worker), the snapshots of folded views in a KV bucket
// ([Snapshots]: a cache, never the truth), and the worker loop ([Worker])
// that takes a nudge, loads the run, drives it while it can and gives it
// back. [Setup] and [Attach] return the queue and the snapshots together.
//
// Work is a nudge, not state: losing or repeating a nudge costs time, never
// safety, which rests on the log's fence. The package must not decide or
// execute anything itself; the driver does.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/arbiter-run/arbiter/internal/bucket"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config names the fleet's JetStream resources. The zero value is usable.
type Config struct {
	// WorkStream is the work queue stream. Default "ARB_WORK".
	WorkStream string
	// WorkPrefix is the nudge subject prefix: a nudge for run R is
	// published on "<prefix>.R". Default "arb.work".
	WorkPrefix string
	// Consumer is the durable pull consumer every worker shares. Default
	// "arb-workers".
	Consumer string
	// AckWait is how long a worker may hold a run without telling the queue
	// it is still busy; after it the run goes to another worker. Default 30s.
	AckWait time.Duration
	// SnapshotBucket is the KV bucket of view snapshots (see [Snapshots]).
	// Default "ARB_VIEWS".
	SnapshotBucket string
	// AgentsBucket is the KV bucket where workers say which agents they
	// offer (see [AgentsTTL]). Default "ARB_AGENTS".
	AgentsBucket string
	// Replicas of the work stream and the buckets. Default 1.
	Replicas int
	// Storage of the work stream and the buckets (file by default).
	Storage jetstream.StorageType
	// WorkInMemory keeps the work stream in memory whatever Storage says:
	// its nudges then cost no disk write (under SyncAlways, no fsync a
	// run), and are gone when the server stops. Whoever starts the server
	// again calls [Queue.Renudge], which nudges every run the log says has
	// not ended. The embedded worker does so with `--durability machine`.
	WorkInMemory bool
}

func (c Config) withDefaults() Config {
	if c.WorkStream == "" {
		c.WorkStream = layout.WorkStream
	}
	if c.WorkPrefix == "" {
		c.WorkPrefix = layout.WorkPrefix
	}
	if c.Consumer == "" {
		c.Consumer = layout.WorkConsumer
	}
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.SnapshotBucket == "" {
		c.SnapshotBucket = layout.ViewsBucket
	}
	if c.AgentsBucket == "" {
		c.AgentsBucket = layout.AgentsBucket
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	return c
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.AckWait < 100*time.Millisecond:
		return fmt.Errorf("fleet config: ack wait %s is too short (at least 100ms)", c.AckWait)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("fleet config: replicas %d (want 1..5)", c.Replicas)
	case strings.ContainsAny(c.WorkPrefix, "*> "):
		return fmt.Errorf("fleet config: work prefix %q holds a wildcard or space", c.WorkPrefix)
	}
	return nil
}

// Queue is the work queue of a fleet: the stream of nudges, the consumer
// every worker shares, and the agents registry that says which agents the
// live workers offer. The snapshots of views are not the queue's: they are
// [Snapshots].
type Queue struct {
	js  jetstream.JetStream
	cfg Config

	mu       sync.Mutex
	registry jetstream.KeyValue // the agents registry, once looked up
}

// Setup creates or updates the fleet's resources (the work stream, the
// shared consumer, the snapshot bucket and the agents registry) and returns
// the queue and the snapshot store over them. It is idempotent.
//
// The work stream keeps at most one nudge per run (MaxMsgsPerSubject 1 with
// DiscardNewPerSubject): a second nudge for a run that already has one
// waiting is refused, which is how nudges are deduplicated.
func Setup(ctx context.Context, js jetstream.JetStream, cfg Config) (*Queue, *Snapshots, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	cfg = cfg.withDefaults()
	sc := jetstream.StreamConfig{
		Name:                 cfg.WorkStream,
		Subjects:             []string{cfg.WorkPrefix + ".>"},
		Retention:            jetstream.WorkQueuePolicy,
		Storage:              cfg.Storage,
		Replicas:             cfg.Replicas,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           time.Minute,
	}
	if cfg.WorkInMemory {
		sc.Storage = jetstream.MemoryStorage
	}
	if s, err := js.Stream(ctx, cfg.WorkStream); err == nil && s.CachedInfo().Config.Storage != sc.Storage {
		// A stream's storage cannot change in place. Its nudges are
		// hints the log can give again: the stream is made anew, and
		// whoever moves it renudges from the log (internal/setup does,
		// either way).
		if err := js.DeleteStream(ctx, cfg.WorkStream); err != nil {
			return nil, nil, fmt.Errorf("set up work stream %s: move it to %s storage: %w", cfg.WorkStream, sc.Storage, err)
		}
	}
	if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
		return nil, nil, fmt.Errorf("set up work stream %s: %w", cfg.WorkStream, err)
	}
	_, err := js.CreateOrUpdateConsumer(ctx, cfg.WorkStream, jetstream.ConsumerConfig{
		Durable:       cfg.Consumer,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 100000,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("set up work consumer %s: %w", cfg.Consumer, err)
	}
	_, err = js.CreateOrUpdateKeyValue(ctx, snapshotBucketConfig(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("set up snapshot bucket %s: %w", cfg.SnapshotBucket, err)
	}
	reg, err := js.CreateOrUpdateKeyValue(ctx, agentsBucketConfig(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("set up agents registry %s: %w", cfg.AgentsBucket, err)
	}
	return &Queue{js: js, cfg: cfg, registry: reg}, &Snapshots{js: js, bucket: cfg.SnapshotBucket, kv: bucket.New(js, cfg.SnapshotBucket)}, nil
}

// Attach returns the queue and the snapshot store whose work stream, shared
// consumer, snapshot bucket and agents registry already exist, creating and
// changing nothing: for a worker whose NATS user may use them but not set
// them up (an administrator does, with `arbiter setup`). A missing one is an
// error wrapping jetstream.ErrStreamNotFound, ErrConsumerNotFound or
// ErrBucketNotFound. The queue's AckWait is the consumer's, as set up.
func Attach(ctx context.Context, js jetstream.JetStream, cfg Config) (*Queue, *Snapshots, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	cfg = cfg.withDefaults()
	c, err := js.Consumer(ctx, cfg.WorkStream, cfg.Consumer)
	if err != nil {
		return nil, nil, fmt.Errorf("attach work queue: consumer %s of stream %s: %w", cfg.Consumer, cfg.WorkStream, err)
	}
	// The consumer's ack wait is what the server holds a worker to,
	// whatever this worker was configured with: signs of life follow it.
	if w := c.CachedInfo().Config.AckWait; w > 0 {
		cfg.AckWait = w
	}
	_, err = js.KeyValue(ctx, cfg.SnapshotBucket)
	if err != nil {
		return nil, nil, fmt.Errorf("attach snapshots: bucket %s: %w", cfg.SnapshotBucket, err)
	}
	reg, err := js.KeyValue(ctx, cfg.AgentsBucket)
	if err != nil {
		return nil, nil, fmt.Errorf("attach work queue: agents registry %s: %w", cfg.AgentsBucket, err)
	}
	return &Queue{js: js, cfg: cfg, registry: reg}, &Snapshots{js: js, bucket: cfg.SnapshotBucket, kv: bucket.New(js, cfg.SnapshotBucket)}, nil
}

// NewQueue returns the queue over resources someone set up, without I/O:
// for clients that only publish nudges and read the agents registry (the
// operator command, [client]). It creates and checks nothing.
func NewQueue(js jetstream.JetStream, cfg Config) *Queue {
	return &Queue{js: js, cfg: cfg.withDefaults()}
}

// Config returns the queue's configuration with defaults filled in.
func (q *Queue) Config() Config { return q.cfg }

// Nudge asks the fleet to look at run. why names the occasion, and with the
// run it forms the message id, so the same nudge published twice within the
// duplicates window is stored once. A run that already has a nudge waiting
// is not nudged again (that is not an error).
func (q *Queue) Nudge(ctx context.Context, run, why string) error {
	return q.publishOnce(ctx, q.cfg.WorkPrefix+"."+run, run+"/"+why)
}

// publishOnce stores an empty message on subject under message id id, so
// that the same nudge published twice within the duplicates window is
// stored once; a subject that already has a message waiting is not
// nudged again (that is not an error).
//
// A message id is unique in the whole stream, not on its subject, and
// the operator user may publish on the stream too: a message it stored
// under an id a worker or client will use (they are made of a run's id and
// what anyone can read of it: a count of its events, a decision's
// sequence, an approval's id) would have the server take the real nudge
// for a duplicate and drop it, and leave the run waiting for a look that
// never comes. So a duplicate is not believed to be this nudge: the
// message is published again with no id, which no other message can
// take. A nudge stored twice costs one more look at the run.
func (q *Queue) publishOnce(ctx context.Context, subject, id string) error {
	ack, err := q.js.PublishMsg(ctx, &nats.Msg{Subject: subject}, jetstream.WithMsgID(id))
	if err == nil && ack.Duplicate {
		_, err = q.js.PublishMsg(ctx, &nats.Msg{Subject: subject})
	}
	if alreadyNudged(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("nudge %s: %w", subject, err)
	}
	return nil
}

// errStoreFailed is JetStream's code for a message the store refused; with
// DiscardNewPerSubject, and the server's reason naming the subject's limit
// (perSubjectFull), that is a run that already has a nudge waiting.
const errStoreFailed = 10077

// perSubjectFull is in the description of a store refused because its
// subject holds its most messages already (nats-server's
// ErrMaxMsgsPerSubject).
const perSubjectFull = "maximum messages per subject exceeded"

// alreadyNudged reports whether err is the refusal of a nudge because its
// subject has one waiting. The same code also refuses a store for a full
// stream (its messages, its bytes): that nudge is lost, and an error.
func alreadyNudged(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errStoreFailed && strings.Contains(apiErr.Description, perSubjectFull)
}
