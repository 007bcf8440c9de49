// Package kvwindows keeps the fleet-wide windows of rules files
// ([rules.Windows]) in a JetStream KV bucket: one key per rule and hour,
// its value the count, updated with compare-and-set so that any number of
// workers count every call once. It must not decide anything: the rules
// policy reads what it counts.
//
// A count is believed only when a writer of the bucket stored it (see
// internal/bucket): a user who may not write the bucket can still have the
// server store a reply of its own on a window's key, and such a value is
// refused with the key named, so the rule fails closed on it rather than
// count from it.
package kvwindows

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/arbiter-run/arbiter/internal/bucket"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/nats-io/nats.go/jetstream"
)

// Config is the bucket. The zero value is bucket ARB_RATES, one replica.
type Config struct {
	// Bucket defaults to "ARB_RATES". A worker's NATS user must be allowed
	// to publish on $KV.<Bucket>.>.
	Bucket string
	// Replicas defaults to 1; use 3 on a cluster.
	Replicas int
}

// MaxAttempts bounds the compare-and-set retries of one Take.
const MaxAttempts = 64

// ErrContended: a Take lost the compare-and-set race MaxAttempts times.
var ErrContended = errors.New("window contended")

// Windows counts in a KV bucket.
type Windows struct{ b *bucket.Bucket }

var _ rules.Windows = (*Windows)(nil)

// Open creates (or opens) the bucket on js. Keys expire two hours after
// their last update, so a window outlives its hour and no more.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Windows, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = layout.RatesBucket
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	// Workers may not create buckets (arbiter setup does, see Setup); a
	// client that may, such as the embedded default or a test, creates it
	// on first use.
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, BucketConfig(cfg))
		if err != nil {
			return nil, fmt.Errorf("open window bucket %s: it does not exist and this user cannot create it (run arbiter setup): %w", cfg.Bucket, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open window bucket %s: %w", cfg.Bucket, err)
	}
	return &Windows{b: bucket.New(js, kv.Bucket())}, nil
}

// BucketConfig is the bucket of fleet-wide rate windows cfg names: the
// administrator's setup creates it.
func BucketConfig(cfg Config) jetstream.KeyValueConfig {
	if cfg.Bucket == "" {
		cfg.Bucket = layout.RatesBucket
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	return jetstream.KeyValueConfig{
		Bucket: cfg.Bucket, History: 1, TTL: 2 * time.Hour, Replicas: cfg.Replicas, Storage: jetstream.FileStorage,
	}
}

// Take counts one call in key if fewer than max are counted there. It reads
// the count and writes count+1 only if nobody wrote since (the key's
// revision), retrying on a lost race.
func (w *Windows) Take(ctx context.Context, key string, max int64) (int64, bool, error) {
	for range MaxAttempts {
		e, err := w.b.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if max <= 0 {
				return 0, false, nil
			}
			if _, err := w.b.Create(ctx, key, []byte("1")); err == nil {
				return 0, true, nil
			} else if !errors.Is(err, bucket.ErrConflict) {
				return 0, false, fmt.Errorf("create window %s: %w", key, err)
			}
			continue // created meanwhile: read it
		}
		if err != nil {
			return 0, false, fmt.Errorf("read window %s: %w", key, err)
		}
		n, err := strconv.ParseInt(string(e.Value), 10, 64)
		if err != nil || n < 0 {
			return 0, false, fmt.Errorf("window %s holds %q, not a count", key, e.Value)
		}
		if n >= max {
			return n, false, nil
		}
		if _, err := w.b.Update(ctx, key, []byte(strconv.FormatInt(n+1, 10)), e.Revision); err == nil {
			return n, true, nil
		} else if !errors.Is(err, bucket.ErrConflict) {
			return 0, false, fmt.Errorf("update window %s: %w", key, err)
		}
	}
	return 0, false, fmt.Errorf("%w: %s lost %d compare-and-set races", ErrContended, key, MaxAttempts)
}
