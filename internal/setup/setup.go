// Package setup is the administrator's step: it creates or updates
// everything Arbiter keeps on a NATS server (the runs streams, the decisions
// stream, the work stream with its shared consumer, the snapshot bucket)
// and the agents registry, and says what it changed. `arbiter setup` and a worker hosting the
// embedded server use it; a worker joining a server only attaches, because
// its NATS user may not manage streams (ADR 0008).
//
// It owns no layout of its own: events.Open and fleet.Setup say what the
// resources are.
package setup

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/arbiter-run/arbiter/notify"
	"github.com/arbiter-run/arbiter/rules/kvwindows"
	"github.com/nats-io/nats.go/jetstream"
)

// Change is what setup did to one resource.
type Change struct {
	Kind   string // "stream" or "consumer"
	Name   string // "ARB_RUNS_0", "ARB_WORK/arb-workers"
	Action string // "created", "updated" or "unchanged"
}

func (c Change) String() string { return c.Action + " " + c.Kind + " " + c.Name }

// Run creates or updates the log described by lc and the fleet's queue
// described by fc on js, which must be allowed the JetStream API (the admin
// user), and returns what changed, resource by resource. Running it again
// with the same configuration changes nothing and says so. When the work
// stream is kept in memory (fleet.Config.WorkInMemory), or was and is moved
// back to disk, every run that has not ended is nudged again
// (fleet.Queue.Renudge).
func Run(ctx context.Context, js jetstream.JetStream, lc events.Config, fc fleet.Config) ([]Change, error) {
	if err := lc.Validate(); err != nil {
		return nil, err
	}
	if err := fc.Validate(); err != nil {
		return nil, err
	}
	res := resources(lc, fc)
	before := make([]any, len(res))
	for i, r := range res {
		cfg, err := r.config(ctx, js)
		if err != nil {
			return nil, err
		}
		before[i] = cfg
	}
	log, err := events.Open(ctx, js, lc)
	if err != nil {
		return nil, err
	}
	for k := 0; k < log.Config().Shards; k++ {
		if _, err := js.CreateOrUpdateConsumer(ctx, log.StreamName(k), notify.ConsumerConfig(log, k, "")); err != nil {
			return nil, fmt.Errorf("set up the notifiers' consumer on %s: %w", log.StreamName(k), err)
		}
	}
	q, _, err := fleet.Setup(ctx, js, fc)
	if err != nil {
		return nil, err
	}
	if fc.WorkInMemory || workWasInMemory(res, before) {
		// A work stream in memory starts empty with its server, and one
		// moved between memory and disk is made anew: either way its
		// nudges are gone, and the log gives them again.
		if _, err := q.Renudge(ctx, log); err != nil {
			return nil, err
		}
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, kvwindows.BucketConfig(kvwindows.Config{Replicas: fc.Replicas})); err != nil {
		return nil, fmt.Errorf("set up rate windows bucket %s: %w", layout.RatesBucket, err)
	}
	out := make([]Change, len(res))
	for i, r := range res {
		after, err := r.config(ctx, js)
		if err != nil {
			return nil, err
		}
		c := Change{Kind: r.kind, Name: r.name(), Action: "unchanged"}
		switch {
		case after == nil:
			return nil, fmt.Errorf("set up %s %s: not there after setup", r.kind, r.name())
		case before[i] == nil:
			c.Action = "created"
		case !reflect.DeepEqual(before[i], after):
			c.Action = "updated"
		}
		out[i] = c
	}
	return out, nil
}

// workWasInMemory reports whether the work stream among res was in memory
// before setup, by its configuration in before (nil: it did not exist).
func workWasInMemory(res []resource, before []any) bool {
	for i, r := range res {
		if sc, ok := before[i].(jetstream.StreamConfig); ok && r.work {
			return sc.Storage == jetstream.MemoryStorage
		}
	}
	return false
}

// resource is one thing setup makes.
type resource struct {
	kind             string
	stream, consumer string
	work             bool // the fleet's work stream
}

func (r resource) name() string {
	if r.kind == "consumer" {
		return r.stream + "/" + r.consumer
	}
	return r.stream
}

// config is the resource's configuration on the server, or nil when it
// does not exist.
func (r resource) config(ctx context.Context, js jetstream.JetStream) (any, error) {
	if r.kind == "consumer" {
		c, err := js.Consumer(ctx, r.stream, r.consumer)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("look up consumer %s: %w", r.name(), err)
		}
		return c.CachedInfo().Config, nil
	}
	s, err := js.Stream(ctx, r.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", r.stream, err)
	}
	return s.CachedInfo().Config, nil
}

func resources(lc events.Config, fc fleet.Config) []resource {
	l := lc.WithDefaults()
	f := fleet.NewQueue(nil, fc).Config()
	var out []resource
	for k := 0; k < l.Shards; k++ {
		out = append(out, resource{kind: "stream", stream: layout.ShardStream(l.Stream, k)})
	}
	for k := 0; k < l.Shards; k++ {
		out = append(out, resource{kind: "consumer", stream: layout.ShardStream(l.Stream, k), consumer: layout.ShardConsumer(layout.NotifyConsumer, k)})
	}
	return append(out,
		resource{kind: "stream", stream: l.DecisionStream},
		resource{kind: "stream", stream: f.WorkStream, work: true},
		resource{kind: "consumer", stream: f.WorkStream, consumer: f.Consumer},
		resource{kind: "stream", stream: layout.KVStream(f.SnapshotBucket)},
		resource{kind: "stream", stream: layout.KVStream(f.AgentsBucket)},
		resource{kind: "stream", stream: layout.KVStream(layout.RatesBucket)})
}
