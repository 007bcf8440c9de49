package fleet

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/bucket"
	"github.com/nats-io/nats.go/jetstream"
)

// Workers say which agents they offer in a KV bucket of their own (the
// agents registry, Config.AgentsBucket): one key per agent and worker,
// put again every AgentsTTL/3, gone AgentsTTL after a worker stops. A run
// whose agent no live worker offers is refused at start (`arbiter start`)
// or failed, with the reason recorded, by the first worker that finds it:
// it never sits RUNNING with nobody to drive it.

// AgentsTTL is how long a worker's offer of an agent lasts unless renewed.
const AgentsTTL = 30 * time.Second

// anyAgent is the registry name of a worker's default agent (the ""
// entry of WorkerConfig.Agents), which drives runs of any agent.
const anyAgent = "*"

func agentsBucketConfig(cfg Config) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket: cfg.AgentsBucket, History: 1, TTL: AgentsTTL, Storage: cfg.Storage, Replicas: cfg.Replicas,
		Description: "Arbiter agents offered by live workers",
	}
}

// agentKey is the registry key of agent offered by worker: the name in hex
// (any agent name is then a valid key token), a dot, the worker's id.
func agentKey(agent, worker string) string {
	return hex.EncodeToString([]byte(agent)) + "." + worker
}

func (q *Queue) agents(ctx context.Context) (jetstream.KeyValue, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.registry != nil {
		return q.registry, nil
	}
	kv, err := q.js.KeyValue(ctx, q.cfg.AgentsBucket)
	if err != nil {
		return nil, fmt.Errorf("agents registry %s: %w", q.cfg.AgentsBucket, err)
	}
	q.registry = kv
	return kv, nil
}

// offer records that worker offers agents, each with its run defaults,
// for AgentsTTL.
func (q *Queue) offer(ctx context.Context, worker string, agents []offerValue) error {
	if _, err := q.agents(ctx); err != nil {
		return err
	}
	kv := bucket.New(q.js, q.cfg.AgentsBucket)
	for _, a := range agents {
		b, err := json.Marshal(a)
		if err != nil {
			return fmt.Errorf("offer agent %q: %w", a.Agent, err)
		}
		if _, err := kv.Put(ctx, agentKey(a.Agent, worker), b); err != nil {
			return fmt.Errorf("offer agent %q: %w", a.Agent, err)
		}
	}
	return nil
}

// Offered reports whether a live worker offers agent, by name or through
// a default agent that drives any run. It reads the registry with stream
// info and direct gets only (no consumer), as any client may.
func (q *Queue) Offered(ctx context.Context, agent string) (bool, error) {
	for _, name := range []string{agent, anyAgent} {
		es, err := q.entries(ctx, hex.EncodeToString([]byte(name))+".*")
		if err != nil || len(es) > 0 {
			return len(es) > 0, err
		}
	}
	return false, nil
}

// Agents lists the agents live workers offer, sorted; "*" stands for a
// worker's default agent, which drives runs of any agent.
func (q *Queue) Agents(ctx context.Context) ([]string, error) {
	es, err := q.entries(ctx, ">")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, e := range es {
		name, _, _ := strings.Cut(e.Key, ".")
		if b, err := hex.DecodeString(name); err == nil {
			seen[string(b)] = true
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

// entries reads the live offers on the registry's keys that match filter,
// in the order of their keys: each a worker's, written by a worker (see
// internal/bucket). A key holding anything else (a reply the server was
// made to store there by a user who may not write the registry) is no
// offer, and neither is a delete marker.
func (q *Queue) entries(ctx context.Context, filter string) ([]bucket.Entry, error) {
	b := bucket.New(q.js, q.cfg.AgentsBucket)
	s, err := q.js.Stream(ctx, b.Stream())
	if err != nil {
		return nil, fmt.Errorf("agents registry %s: %w", q.cfg.AgentsBucket, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(b.Subject(filter)))
	if err != nil {
		return nil, fmt.Errorf("agents registry %s: %w", q.cfg.AgentsBucket, err)
	}
	subjects := make([]string, 0, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		subjects = append(subjects, subj)
	}
	sort.Strings(subjects)
	var out []bucket.Entry
	for _, subj := range subjects {
		e, err := b.GetSubject(ctx, subj)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, bucket.ErrNotWritten):
			continue // expired since the info, or not a worker's
		case err != nil:
			return nil, fmt.Errorf("agents registry %s: %w", q.cfg.AgentsBucket, err)
		case len(e.Value) == 0:
			continue // a delete marker
		}
		out = append(out, e)
	}
	return out, nil
}

// advertise keeps the worker's offer of its agents alive until ctx ends.
func (w *Worker) advertise(ctx context.Context) {
	names := make([]offerValue, 0, len(w.cfg.Agents))
	for n := range w.cfg.Agents {
		v := offerValue{Agent: n, RunDefaults: w.cfg.Defaults[n]}
		if n == "" {
			v.Agent = anyAgent
		}
		names = append(names, v)
	}
	id := events.NewID()
	t := time.NewTicker(AgentsTTL / 3)
	defer t.Stop()
	for {
		if err := w.q.offer(ctx, id, names); err != nil && ctx.Err() == nil {
			w.log.Warn("offer agents", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
