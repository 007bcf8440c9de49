// Package layout is where Arbiter keeps its state on a NATS server: the
// default names of its streams, buckets, consumers and subject prefixes,
// the rules that name a shard's stream and subjects, and the bounds of the
// decisions stream. events, fleet,
// embedded, notify, rules/kvwindows, internal/setup, replay and the
// commands take every such name from here and never spell one again, so
// a server set up by one of them is the server the others look for.
//
// It holds names and numbers only: it talks to no server and imports
// nothing.
package layout

import "strconv"

// The defaults. Each is the zero value's meaning in the config that names
// it (events.Config, fleet.Config, embedded.Subjects, notify.Config,
// kvwindows.Config).
const (
	// RunStream is the base name of the runs streams (shard k is
	// "ARB_RUNS_<k>", see [ShardStream]).
	RunStream = "ARB_RUNS"
	// RunPrefix is the first token(s) of every run subject (see
	// [ShardPrefix]).
	RunPrefix = "arb.run"
	// DecisionStream holds the operators' signed decisions, published on
	// "<DecisionPrefix>.<run>".
	DecisionStream = "ARB_DECISIONS"
	DecisionPrefix = "arb.decide"
	// WorkStream is the fleet's work queue of nudges, published on
	// "<WorkPrefix>.<run>" (and "<WorkPrefix>.<run>.expiry" for timers),
	// consumed through the one durable WorkConsumer.
	WorkStream   = "ARB_WORK"
	WorkPrefix   = "arb.work"
	WorkConsumer = "arb-workers"
	// ViewsBucket holds view snapshots, AgentsBucket the agents the live
	// workers offer, RatesBucket the fleet-wide rate windows of rules files.
	ViewsBucket  = "ARB_VIEWS"
	AgentsBucket = "ARB_AGENTS"
	RatesBucket  = "ARB_RATES"
	// NotifyConsumer is the base name of the notifiers' consumers, one on
	// each runs stream (see [ShardConsumer]).
	NotifyConsumer = "arbiter_notify"
)

// The decisions stream's bounds, which its configuration sets and the
// server enforces.
const (
	// MaxDecisionBytes bounds one message of the decisions stream: a
	// signed decision is a few hundred bytes, so anything larger is
	// refused by the server before it is stored.
	MaxDecisionBytes = 16 << 10
	// MaxDecisionsPerRun bounds the decisions kept for one run. Once a run
	// holds this many, the server refuses more for it (and the publisher
	// is told).
	MaxDecisionsPerRun = 1024
)

// ShardStream is the name of shard k's runs stream: "<stream>_<k>".
func ShardStream(stream string, k int) string { return stream + "_" + strconv.Itoa(k) }

// ShardConsumer is the name of a consumer of shard k's runs stream that
// every shard has one of: "<name>_<k>".
func ShardConsumer(name string, k int) string { return name + "_" + strconv.Itoa(k) }

// ShardPrefix is the subject prefix of the runs on shard k of shards:
// prefix itself when there is one shard, "<prefix>.<k>" when there are
// more. A run's events are stored on "<shard prefix>.<run>.<kind>".
func ShardPrefix(prefix string, shards, k int) string {
	if shards == 1 {
		return prefix
	}
	return prefix + "." + strconv.Itoa(k)
}

// KVStream is the name of the stream behind the KV bucket named bucket.
func KVStream(bucket string) string { return "KV_" + bucket }
