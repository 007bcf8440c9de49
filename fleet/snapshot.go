package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/bucket"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go/jetstream"
)

// Snapshots is the store of folded views a fleet keeps beside the log: a KV
// bucket (Config.SnapshotBucket) with one key per run, holding the run's
// view and the tail it covers. It is a cache, never the truth (ADR 0007):
// [Snapshots.Load] reads the events after a snapshot's tail and checks they
// chain onto it, and a snapshot that does not fit is dropped and the run
// folded from its events. A snapshot is read only when a writer of the
// bucket stored it (see internal/bucket): a reply the server was made to
// store on a run's key by a user who may not write the bucket is dropped
// like any snapshot that does not fit. It is safe for concurrent use.
type Snapshots struct {
	js     jetstream.JetStream
	bucket string

	mu sync.Mutex
	kv *bucket.Bucket // the bucket, once found to exist
}

// NewSnapshots returns the snapshot store in the bucket cfg names, without
// I/O: the bucket is looked up on first use. [Setup] and [Attach] return one
// too, with the bucket created or checked.
func NewSnapshots(js jetstream.JetStream, cfg Config) *Snapshots {
	return &Snapshots{js: js, bucket: cfg.withDefaults().SnapshotBucket}
}

func snapshotBucketConfig(cfg Config) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket: cfg.SnapshotBucket, History: 1, Storage: cfg.Storage, Replicas: cfg.Replicas,
		Description: "Arbiter view snapshots: a cache, never the truth",
	}
}

// snapshot is a folded view and the tail it covers: the bytes of one entry.
type snapshot struct {
	Tail events.Tail    `json:"tail"`
	View projector.View `json:"view"`
}

// store returns the bucket, once it was found to exist.
func (s *Snapshots) store(ctx context.Context) (*bucket.Bucket, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv == nil {
		if _, err := s.js.KeyValue(ctx, s.bucket); err != nil {
			return nil, fmt.Errorf("snapshot bucket %s: %w", s.bucket, err)
		}
		s.kv = bucket.New(s.js, s.bucket)
	}
	return s.kv, nil
}

// Save stores r's view as its snapshot, replacing the one before.
func (s *Snapshots) Save(ctx context.Context, r *driver.Run) error {
	kv, err := s.store(ctx)
	if err != nil {
		return fmt.Errorf("save snapshot of %s: %w", r.ID(), err)
	}
	// No HTML escaping: json.Marshal would escape the PolicyJSON the view
	// holds, and the snapshot would no longer be the view.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(snapshot{Tail: r.Tail(), View: r.View()}); err != nil {
		return fmt.Errorf("save snapshot of %s: %w", r.ID(), err)
	}
	if _, err := kv.Put(ctx, r.ID(), buf.Bytes()); err != nil {
		return fmt.Errorf("save snapshot of %s: %w", r.ID(), err)
	}
	return nil
}

// Load loads run with d: from its snapshot plus the events after it when
// there is a usable one, from its events alone otherwise (also when the
// bucket cannot be read). fromSnapshot says which. Its errors are d.Load's,
// or ctx's when it ended while the snapshot was read.
func (s *Snapshots) Load(ctx context.Context, d *driver.Driver, run string) (r *driver.Run, fromSnapshot bool, err error) {
	if kv, err := s.store(ctx); err == nil {
		if e, err := kv.Get(ctx, run); err == nil {
			var snap snapshot
			if json.Unmarshal(e.Value, &snap) == nil && snap.View.Run.ID == run {
				if r, err := d.LoadFrom(ctx, run, snap.View, snap.Tail); err == nil {
					return r, true, nil
				}
			}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, bucket.ErrNotWritten) && ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
	}
	r, err = d.Load(ctx, run)
	return r, false, err
}
