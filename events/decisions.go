package events

import (
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/nats-io/nats.go/jetstream"
)

// Operators never write a run's subjects. An operator's signed decision is
// published on a subject of its own, "<DecisionPrefix>.<run>", stored in the
// decisions stream; the worker that drives the run reads it from there,
// verifies it, and records it on the run with a fenced append of its own
// (the signature travels in the record). See ADR 0007. [Open] creates the
// decisions stream beside the runs streams; publishing and reading it is
// internal/decisions', reached through approvals and client (ADR 0020).

// decisionStreamConfig is the decisions stream: limits retention, nothing
// deleted or purged, one small message per decision, a bounded number per
// run (DiscardNewPerSubject: once full, more are refused, never older ones
// dropped).
func (l *Log) decisionStreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                 l.cfg.DecisionStream,
		Subjects:             []string{l.cfg.DecisionPrefix + ".*"},
		Retention:            jetstream.LimitsPolicy,
		Storage:              l.cfg.Storage,
		Replicas:             l.cfg.Replicas,
		Duplicates:           l.cfg.Duplicates,
		DenyDelete:           true,
		DenyPurge:            true,
		AllowDirect:          true,
		MaxMsgSize:           layout.MaxDecisionBytes,
		MaxMsgsPerSubject:    layout.MaxDecisionsPerRun,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
	}
}
