package fleet

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
)

// DefaultCancelPoll is how often a worker looks for a cancellation of a run
// it drives (see [WorkerConfig.CancelPoll]).
const DefaultCancelPoll = 250 * time.Millisecond

// watchCancel returns ctx cancelled as soon as run r is found cancelled in
// the log (a run.cancelled stored after r's tail, as `arbiter cancel` and
// client.Cancel append it), and a function that stops the watch and says
// whether it cancelled. The first look is one poll after the drive began,
// so a drive that takes less costs nothing; each look is one filtered
// direct get of the run's cancel subject after its tail. What stops the
// run is the fence (the next append conflicts); the watch only stops the
// step in flight at once: the agent's model call, or the tool (whose
// context is cancelled).
func (w *Worker) watchCancel(ctx context.Context, r *driver.Run) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(ctx)
	log := w.d.Log()
	stream := log.StreamName(log.Shard(r.ID()))
	subject := log.Subject(r.ID(), events.RunCancelled)
	from := r.Tail().Seq + 1
	var hit atomic.Bool
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(w.cfg.CancelPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			msgs, err := log.GetBatch(ctx, stream, from, 1, subject)
			if err == nil && len(msgs) > 0 {
				hit.Store(true)
				w.log.Info("run cancelled while driven; stopping the step in flight", "run", r.ID())
				cancel()
				return
			}
		}
	}()
	return ctx, func() bool {
		close(done)
		cancel()
		return hit.Load()
	}
}
