package events

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Operators never write a run's subjects. An operator's signed decision is
// published on a subject of its own, "<DecisionPrefix>.<run>", stored in the
// decisions stream; the worker that drives the run reads it from there,
// verifies it, and records it on the run with a fenced append of its own
// (the signature travels in the record). See ADR 0007.

// MaxDecisionBytes bounds one message of the decisions stream: a signed
// decision is a few hundred bytes, so anything larger is refused by the
// server before it is stored.
const MaxDecisionBytes = 16 << 10

// MaxDecisionsPerRun bounds the decisions kept for one run. Once a run holds
// this many, the server refuses more for it (and the publisher is told).
const MaxDecisionsPerRun = 1024

// DecisionStreamName is the name of the decisions stream.
func (l *Log) DecisionStreamName() string { return l.cfg.DecisionStream }

// DecisionSubject is the subject an operator publishes a decision on run on.
func (l *Log) DecisionSubject(run string) string { return l.cfg.DecisionPrefix + "." + run }

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
		MaxMsgSize:           MaxDecisionBytes,
		MaxMsgsPerSubject:    MaxDecisionsPerRun,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
	}
}

// Decisions returns the messages published for run on the decisions stream
// after stream sequence after, in order, at most max (1..1024).
func (l *Log) Decisions(ctx context.Context, run string, after uint64, max int) ([]*jetstream.RawStreamMsg, error) {
	if err := ValidRunID(run); err != nil {
		return nil, err
	}
	msgs, err := l.GetBatch(ctx, l.cfg.DecisionStream, after+1, max, l.DecisionSubject(run))
	if err != nil {
		return nil, fmt.Errorf("read decisions of run %s: %w", run, err)
	}
	return msgs, nil
}

// PublishDecision stores data, an operator's signed decision encoded as
// JSON, on run's decision subject, and returns its stream sequence. id is
// the message id (a retried publish of the same id is stored once).
func (l *Log) PublishDecision(ctx context.Context, run, id string, data []byte) (uint64, error) {
	if err := ValidRunID(run); err != nil {
		return 0, err
	}
	ack, err := l.js.Publish(ctx, l.DecisionSubject(run), data, jetstream.WithMsgID(id), jetstream.WithExpectStream(l.cfg.DecisionStream))
	if err != nil {
		return 0, fmt.Errorf("publish decision on run %s (a run holds at most %d, of at most %d bytes each): %w", run, MaxDecisionsPerRun, MaxDecisionBytes, err)
	}
	return ack.Sequence, nil
}
