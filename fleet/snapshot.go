package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go/jetstream"
)

// snapshot is a folded view and the tail it covers. It is a cache: loading
// reads the events after its tail and checks they chain onto it, and any
// snapshot that does not fit is dropped and the run folded from its events.
type snapshot struct {
	Tail events.Tail    `json:"tail"`
	View projector.View `json:"view"`
}

// kv returns the snapshot bucket, looked up once.
func (q *Queue) kv(ctx context.Context) (jetstream.KeyValue, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bucket != nil {
		return q.bucket, nil
	}
	kv, err := q.js.KeyValue(ctx, q.cfg.Bucket)
	if err != nil {
		return nil, err
	}
	q.bucket = kv
	return kv, nil
}

// Save stores r's view as its snapshot.
func (q *Queue) Save(ctx context.Context, r *driver.Run) error {
	kv, err := q.kv(ctx)
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

// Load loads run: from its snapshot plus the events after it when there is a
// usable one, from its events alone otherwise. fromSnapshot says which.
func (q *Queue) Load(ctx context.Context, d *driver.Driver, run string) (r *driver.Run, fromSnapshot bool, err error) {
	if kv, err := q.kv(ctx); err == nil {
		if e, err := kv.Get(ctx, run); err == nil {
			var s snapshot
			if json.Unmarshal(e.Value(), &s) == nil && s.View.Run.ID == run {
				if r, err := d.LoadFrom(ctx, run, s.View, s.Tail); err == nil {
					return r, true, nil
				}
			}
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) && ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
	}
	r, err = d.Load(ctx, run)
	return r, false, err
}
