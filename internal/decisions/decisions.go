// Package decisions publishes operators' signed decisions on the decisions
// stream and reads them back: the one place its subjects and bounds are
// used. events.Open creates the stream beside the runs streams; this
// package is what travels on it (ADR 0007).
//
// It is Arbiter's machinery, not its API: an application decides through
// client.Decide (or approvals.Publish), and the driver reads what was
// decided. It neither signs nor verifies a decision (approvals does), and
// never writes a run's subjects.
package decisions

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream is the name of log's decisions stream.
func Stream(log *events.Log) string { return log.Config().DecisionStream }

// Subject is the subject an operator publishes a decision on run on:
// "<DecisionPrefix>.<run>".
func Subject(log *events.Log, run string) string { return log.Config().DecisionPrefix + "." + run }

// Read returns the messages published for run on log's decisions stream
// after stream sequence after, in order, at most max (1..1024), raw: the
// reader verifies them. Each is read with the API's message get
// ([jsinbox.Inbox.MsgGet]), so its sequence and body are the server's
// JSON fields and nothing of its header block is read: the operator user
// chooses the header block of what it publishes here, and a block that
// ends early would make a direct get's reply read as a "not found", hiding
// every decision after it. Such a message is read for its body like any
// other (and refused by the reader as garbage).
func Read(ctx context.Context, log *events.Log, run string, after uint64, max int) ([]*jetstream.RawStreamMsg, error) {
	if err := events.ValidRunID(run); err != nil {
		return nil, err
	}
	inbox, err := jsinbox.For(log.JetStream().Conn())
	if err != nil {
		return nil, fmt.Errorf("read decisions of run %s: %w", run, err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := after + 1; len(out) < max; {
		m, err := inbox.MsgGet(ctx, jsinbox.APIPrefix(log.JetStream()), Stream(log), seq, Subject(log, run))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read decisions of run %s: %w", run, err)
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
	return out, nil
}

// Publish stores data, an operator's signed decision encoded as JSON, on
// run's decision subject, and returns its stream sequence. id is the
// message id (a retried publish of the same id is stored once). The server
// refuses a decision over [layout.MaxDecisionBytes] and one more than
// [layout.MaxDecisionsPerRun] for a run.
func Publish(ctx context.Context, log *events.Log, run, id string, data []byte) (uint64, error) {
	if err := events.ValidRunID(run); err != nil {
		return 0, err
	}
	ack, err := log.JetStream().Publish(ctx, Subject(log, run), data, jetstream.WithMsgID(id), jetstream.WithExpectStream(Stream(log)))
	if err != nil {
		return 0, fmt.Errorf("publish decision on run %s (a run holds at most %d, of at most %d bytes each): %w", run, layout.MaxDecisionsPerRun, layout.MaxDecisionBytes, err)
	}
	if ack.Duplicate {
		// A message id is the stream's, not the subject's, and anyone who
		// may publish decisions chooses ids: the message stored under id
		// is this decision only if it holds these bytes on this subject.
		if err := sameAt(ctx, log, run, ack.Sequence, data); err != nil {
			return 0, fmt.Errorf("publish decision on run %s: message id %s is taken at stream seq %d: %w", run, id, ack.Sequence, err)
		}
	}
	return ack.Sequence, nil
}

// ErrIDTaken marks a decision whose message id holds another message: the
// decision was not stored.
var ErrIDTaken = errors.New("the message stored under this id is not this decision")

// sameAt checks that the decisions stream holds data on run's subject at
// seq.
func sameAt(ctx context.Context, log *events.Log, run string, seq uint64, data []byte) error {
	inbox, err := jsinbox.For(log.JetStream().Conn())
	if err != nil {
		return err
	}
	m, err := inbox.MsgGet(ctx, jsinbox.APIPrefix(log.JetStream()), Stream(log), seq, Subject(log, run))
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("cannot read it to compare: %w", err)
	}
	if err != nil || m.Sequence != seq || !bytes.Equal(m.Data, data) {
		return ErrIDTaken
	}
	return nil
}
