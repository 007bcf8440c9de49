package events

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config says where the log lives. The zero value is usable: every field has
// a documented default that [Config.withDefaults] fills in.
type Config struct {
	// Stream is the base name of the runs streams; shard k is "<Stream>_<k>".
	// Default "ARB_RUNS".
	Stream string
	// Prefix is the first tokens of every run subject. Default "arb.run".
	Prefix string
	// Shards is K, the number of runs streams. A run lives on shard
	// xxhash(run) mod K. K is recorded in each stream's metadata when the log
	// is created, and [Open] refuses a different K later. Default 1.
	Shards int
	// Replicas per stream (1 or 3 in practice; 3 is recommended in
	// production). Default 1.
	Replicas int
	// Storage is file (the zero value) or memory.
	Storage jetstream.StorageType
	// Duplicates is the window in which JetStream recognises a repeated
	// message id. Default two minutes.
	Duplicates time.Duration
	// DecisionStream is the stream operators publish signed decisions to.
	// Default "ARB_DECISIONS".
	DecisionStream string
	// DecisionPrefix is the first tokens of the decision subjects: a
	// decision on run R is published on "<DecisionPrefix>.R". Default
	// "arb.decide". It must not overlap Prefix.
	DecisionPrefix string
}

func (c Config) withDefaults() Config {
	if c.Stream == "" {
		c.Stream = layout.RunStream
	}
	if c.Prefix == "" {
		c.Prefix = layout.RunPrefix
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Duplicates == 0 {
		c.Duplicates = 2 * time.Minute
	}
	if c.DecisionStream == "" {
		c.DecisionStream = layout.DecisionStream
	}
	if c.DecisionPrefix == "" {
		c.DecisionPrefix = layout.DecisionPrefix
	}
	return c
}

// WithDefaults returns c with every unset field at its default: the names a
// log opened with c uses.
func (c Config) WithDefaults() Config { return c.withDefaults() }

// Validate reports a configuration that cannot work, naming the field.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Shards < 1 || c.Shards > 1024:
		return fmt.Errorf("log config: shards %d (want 1..1024)", c.Shards)
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("log config: replicas %d (want 1..5)", c.Replicas)
	case c.Duplicates < 0:
		return fmt.Errorf("log config: negative duplicates window %s", c.Duplicates)
	case c.DecisionPrefix == c.Prefix || strings.HasPrefix(c.DecisionPrefix, c.Prefix+".") || strings.HasPrefix(c.Prefix, c.DecisionPrefix+"."):
		return fmt.Errorf("log config: decision prefix %q overlaps the run prefix %q", c.DecisionPrefix, c.Prefix)
	case c.DecisionStream == c.Stream || strings.HasPrefix(c.DecisionStream, c.Stream+"_"):
		return fmt.Errorf("log config: decision stream %q clashes with the runs streams %s_<k>", c.DecisionStream, c.Stream)
	}
	return nil
}

const metaShards = "arbiter_shards"

// Log appends and reads run events on JetStream.
type Log struct {
	js      jetstream.JetStream
	cfg     Config
	streams []jetstream.Stream            // handles by shard, looked up once
	names   []string                      // stream names by shard
	filters []string                      // subject prefixes by shard
	box     atomic.Pointer[jsinbox.Inbox] // the connection's, once used
}

// newLog is the log of cfg (with its defaults) on js, its names made once.
func newLog(js jetstream.JetStream, cfg Config) *Log {
	l := &Log{js: js, cfg: cfg}
	for k := 0; k < cfg.Shards; k++ {
		l.names = append(l.names, layout.ShardStream(cfg.Stream, k))
		l.filters = append(l.filters, layout.ShardPrefix(cfg.Prefix, cfg.Shards, k))
	}
	return l
}

// Open creates or updates the runs streams described by cfg and returns the
// log. It is idempotent: opening an existing log with the same config changes
// nothing. It refuses to reshard: a K differing from the one recorded in an
// existing stream is an error.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	l := newLog(js, cfg)
	for k := 0; k < cfg.Shards; k++ {
		name := l.StreamName(k)
		if s, err := js.Stream(ctx, name); err == nil {
			if got := s.CachedInfo().Config.Metadata[metaShards]; got != "" && got != strconv.Itoa(cfg.Shards) {
				return nil, fmt.Errorf("open log: stream %s was created with %s shards, config says %d (resharding is not supported)", name, got, cfg.Shards)
			}
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("open log: look up stream %s: %w", name, err)
		}
		sc := jetstream.StreamConfig{
			Name:        name,
			Subjects:    []string{l.shardPrefix(k) + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     cfg.Storage,
			Replicas:    cfg.Replicas,
			Duplicates:  cfg.Duplicates,
			DenyDelete:  true,
			DenyPurge:   true,
			AllowDirect: true,
			Discard:     jetstream.DiscardOld,
			Metadata:    map[string]string{metaShards: strconv.Itoa(cfg.Shards)},
		}
		s, err := js.CreateOrUpdateStream(ctx, sc)
		if err != nil {
			return nil, fmt.Errorf("open log: create stream %s: %w", name, err)
		}
		l.streams = append(l.streams, s)
	}
	if _, err := js.CreateOrUpdateStream(ctx, l.decisionStreamConfig()); err != nil {
		return nil, fmt.Errorf("open log: create stream %s: %w", cfg.DecisionStream, err)
	}
	return l, nil
}

// Config returns the log's configuration with defaults filled in.
func (l *Log) Config() Config { return l.cfg }

// JetStream returns the JetStream handle the log uses.
func (l *Log) JetStream() jetstream.JetStream { return l.js }

// Shard returns the shard run lives on.
func (l *Log) Shard(run string) int {
	if l.cfg.Shards == 1 {
		return 0
	}
	return int(xxhash.Sum64String(run) % uint64(l.cfg.Shards))
}

// StreamName returns the name of shard k's stream.
func (l *Log) StreamName(k int) string {
	if k >= 0 && k < len(l.names) {
		return l.names[k]
	}
	return layout.ShardStream(l.cfg.Stream, k)
}

func (l *Log) shardPrefix(k int) string {
	if k >= 0 && k < len(l.filters) {
		return l.filters[k]
	}
	return layout.ShardPrefix(l.cfg.Prefix, l.cfg.Shards, k)
}

// Subject returns the subject an event of kind k of run is stored on:
// "<prefix>.<run>.<kind>" (with the shard as a token after the prefix when
// there is more than one shard).
func (l *Log) Subject(run string, k Kind) string { return l.subjectOn(l.Shard(run), run, k) }

func (l *Log) subjectOn(shard int, run string, k Kind) string {
	return l.shardPrefix(shard) + "." + run + "." + string(k)
}

// RunFilter returns the subject filter matching every event of run. It is
// the fence subject: every writer to a run fences on this same string.
func (l *Log) RunFilter(run string) string { return l.runFilterOn(l.Shard(run), run) }

func (l *Log) runFilterOn(shard int, run string) string {
	return l.shardPrefix(shard) + "." + run + ".>"
}

// CheckStored reports whether e, read from a message stored on subject
// with headers hdr, is an event this log's appends stored: on the subject
// its run and kind belong on, and under its own event id as the message id
// (one Nats-Msg-Id header, the event's id), which every append sets. NATS
// permissions restrict who may publish on which subject, so an event whose
// kind does not match its subject (a run.finished smuggled onto an
// approval.granted subject) must not be believed. Nor may a message the
// server itself was made to store there: a JetStream API reply goes to
// whatever reply subject its request named, and a reply that carries a
// stored message's bytes (a direct get with no headers) would otherwise be
// taken for an event appended by someone allowed to append. hdr must be
// the headers as the server served them: a direct get's through jsinbox,
// which keeps only the server's values (see jsinbox.ErrForgedHeader). The
// error wraps [ErrBrokenChain].
func (l *Log) CheckStored(subject string, hdr nats.Header, e Event) error {
	if want := l.Subject(e.Run, e.Kind); subject != want {
		return fmt.Errorf("%w: event %s (%s of run %s) stored on %s, not %s", ErrBrokenChain, e.ID, e.Kind, e.Run, subject, want)
	}
	if !Appended(hdr, e) {
		return fmt.Errorf("%w: event %s (%s of run %s) on %s was not stored by an append: its message ids are %q, not the event's id alone", ErrBrokenChain, e.ID, e.Kind, e.Run, subject, hdr.Values(jetstream.MsgIDHeader))
	}
	return nil
}

// Appended reports whether a message stored with headers hdr carries e's
// id as its one message id, as every append stores an event: the half of
// [Log.CheckStored] that a reader checking subjects its own way (replay)
// checks too.
func Appended(hdr nats.Header, e Event) bool {
	ids := hdr.Values(jetstream.MsgIDHeader)
	return len(ids) == 1 && ids[0] == e.ID
}

// KindFilter returns the subject filter matching every event of kind k of
// every run on shard.
func (l *Log) KindFilter(shard int, k Kind) string {
	return l.shardPrefix(shard) + ".*." + string(k)
}

// ApprovalFilters returns the subject filters, one per shard, that match
// every approval event of every run (with one shard: "arb.run.*.approval.>").
func (l *Log) ApprovalFilters() []string {
	out := make([]string, l.cfg.Shards)
	for k := range out {
		out[k] = l.shardPrefix(k) + ".*.approval.>"
	}
	return out
}

// Tail is where a run stands in the log: the stream sequence of its last
// event, how many events it has, and the hash of the last one. The zero Tail
// is a run with no events. Every append is fenced on a Tail.
type Tail struct {
	Seq   uint64 `json:"seq"`
	Count uint64 `json:"count"`
	Hash  string `json:"hash,omitempty"`
}

// Record is one stored event with where it is stored.
type Record struct {
	Event     Event
	Data      []byte // the exact stored bytes
	Stream    string
	StreamSeq uint64
}

// Tail returns the position of the run just after this record.
func (r Record) Tail() Tail {
	return Tail{Seq: r.StreamSeq, Count: r.Event.Seq, Hash: Hash(r.Data)}
}

func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, 10164:
			return true
		}
	}
	return false
}

// ErrConflict is returned when an append's fence no longer holds: another
// writer appended to the run first. A writer that gets it must stop driving
// the run.
var ErrConflict = errors.New("run changed under the writer (fenced append lost)")

// Append stores ev as the next event of its run, fenced on tail: it succeeds
// only if the run's last event is still the one tail names. It fills in
// ev.Seq, ev.Prev and ev.V and returns the run's new tail.
//
// If an earlier attempt of the same event was stored but its acknowledgement
// lost, Append recognises the event by its id and returns success, never a
// second copy. A lost race returns an error wrapping [ErrConflict].
func (l *Log) Append(ctx context.Context, tail Tail, ev Event) (Tail, error) {
	p, err := l.Begin(ctx, tail, ev)
	if err != nil {
		return Tail{}, err
	}
	if _, err := p.Wait(ctx); err != nil {
		return Tail{}, err
	}
	return p.Tail(), nil
}

// last returns the run's last stored message, or nil if the run has none.
func (l *Log) last(ctx context.Context, run string) (*jetstream.RawStreamMsg, error) {
	b, err := l.inbox()
	if err != nil {
		return nil, err
	}
	m, err := b.GetLast(ctx, jsinbox.APIPrefix(l.js), l.StreamName(l.Shard(run)), l.RunFilter(run))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	return m, forged(err)
}

// Tail returns where run stands now, read from its last stored event.
func (l *Log) Tail(ctx context.Context, run string) (Tail, error) {
	if err := ValidRunID(run); err != nil {
		return Tail{}, err
	}
	m, err := l.last(ctx, run)
	if err != nil {
		return Tail{}, fmt.Errorf("tail of run %s: %w", run, err)
	}
	if m == nil {
		return Tail{}, nil
	}
	e, err := Decode(m.Data)
	if err != nil {
		return Tail{}, fmt.Errorf("tail of run %s: %w", run, err)
	}
	if err := l.CheckStored(m.Subject, m.Header, e); err != nil {
		return Tail{}, fmt.Errorf("tail of run %s: %w", run, err)
	}
	return Tail{Seq: m.Sequence, Count: e.Seq, Hash: Hash(m.Data)}, nil
}

// Attach returns the log whose streams already exist, without creating or
// changing anything: for clients (the operator command, replay, watchers)
// whose NATS user may read and append but not manage streams.
func Attach(ctx context.Context, js jetstream.JetStream, cfg Config) (*Log, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	l := newLog(js, cfg)
	for k := 0; k < cfg.Shards; k++ {
		s, err := js.Stream(ctx, l.StreamName(k))
		if err != nil {
			return nil, fmt.Errorf("attach log: stream %s: %w", l.StreamName(k), err)
		}
		if got := s.CachedInfo().Config.Metadata[metaShards]; got != "" && got != strconv.Itoa(cfg.Shards) {
			return nil, fmt.Errorf("attach log: stream %s was created with %s shards, config says %d", l.StreamName(k), got, cfg.Shards)
		}
		l.streams = append(l.streams, s)
	}
	return l, nil
}
