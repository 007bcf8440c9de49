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
	"github.com/arbiter-run/arbiter/internal/jsinbox"
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
	kv, err := q.agents(ctx)
	if err != nil {
		return err
	}
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
// a default agent that drives any run. It reads the registry with direct
// gets only (no consumer), as any client may.
func (q *Queue) Offered(ctx context.Context, agent string) (bool, error) {
	inbox, err := jsinbox.For(q.js.Conn())
	if err != nil {
		return false, fmt.Errorf("agents registry %s: %w", q.cfg.AgentsBucket, err)
	}
	for _, name := range []string{agent, anyAgent} {
		// jsinbox, not the client's direct get: a stored entry whose own
		// headers claim "404" would otherwise hide a live offer.
		_, err := inbox.GetLast(ctx, jsinbox.APIPrefix(q.js), "KV_"+q.cfg.AgentsBucket, "$KV."+q.cfg.AgentsBucket+"."+hex.EncodeToString([]byte(name))+".*")
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return false, fmt.Errorf("agents registry %s: %w", q.cfg.AgentsBucket, err)
		}
	}
	return false, nil
}

// Agents lists the agents live workers offer, sorted; "*" stands for a
// worker's default agent, which drives runs of any agent.
func (q *Queue) Agents(ctx context.Context) ([]string, error) {
	s, err := q.js.Stream(ctx, "KV_"+q.cfg.AgentsBucket)
	if err != nil {
		return nil, fmt.Errorf("agents registry %s: %w", q.cfg.AgentsBucket, err)
	}
	prefix := "$KV." + q.cfg.AgentsBucket + "."
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("agents registry %s: %w", q.cfg.AgentsBucket, err)
	}
	seen := map[string]bool{}
	for subj := range info.State.Subjects {
		name, _, _ := strings.Cut(strings.TrimPrefix(subj, prefix), ".")
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
