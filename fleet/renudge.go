package fleet

import (
	"context"
	"fmt"
	"strings"

	"github.com/arbiter-run/arbiter/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Renudge nudges every run of log that has not ended, and returns how many
// it nudged: for a work stream that lost its nudges ([Config.WorkInMemory]
// after its server stopped). A run is one that has a run.created event; it
// has ended when it has a run.finished, run.failed or run.cancelled event.
// Nudging a run that waits on an operator is harmless: a worker looks at it,
// finds nothing to do, and arms its expiry timer again. It reads one subject
// list per kind and shard, so its cost follows the number of runs.
func (q *Queue) Renudge(ctx context.Context, log *events.Log) (int, error) {
	n := 0
	for k := range log.Config().Shards {
		stream, err := q.js.Stream(ctx, log.StreamName(k))
		if err != nil {
			return n, fmt.Errorf("renudge: stream %s: %w", log.StreamName(k), err)
		}
		runs := func(kind events.Kind) (map[string]bool, error) {
			filter := log.KindFilter(k, kind)
			info, err := stream.Info(ctx, jetstream.WithSubjectFilter(filter))
			if err != nil {
				return nil, fmt.Errorf("renudge: runs of %s on %s: %w", kind, log.StreamName(k), err)
			}
			head, tail, _ := strings.Cut(filter, "*")
			out := make(map[string]bool, len(info.State.Subjects))
			for subject := range info.State.Subjects {
				// Only the worker user may write run subjects, but a
				// subject that names no valid run id is no run's.
				if run, ok := strings.CutSuffix(strings.TrimPrefix(subject, head), tail); ok && events.ValidRunID(run) == nil {
					out[run] = true
				}
			}
			return out, nil
		}
		open, err := runs(events.RunCreated)
		if err != nil {
			return n, err
		}
		for _, end := range []events.Kind{events.RunFinished, events.RunFailed, events.RunCancelled} {
			ended, err := runs(end)
			if err != nil {
				return n, err
			}
			for run := range ended {
				delete(open, run)
			}
		}
		for run := range open {
			if err := q.Nudge(ctx, run, "renudge"); err != nil {
				return n, fmt.Errorf("renudge run %s: %w", run, err)
			}
			n++
		}
	}
	return n, nil
}
