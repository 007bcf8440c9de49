package fleet

import (
	"context"
	"sync"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
)

// DefaultCancelPoll is how often a worker looks for cancellations of the
// runs it drives (see [WorkerConfig.CancelPoll]).
const DefaultCancelPoll = 250 * time.Millisecond

// cancels is a worker's watch for the cancellation of runs it drives: a
// run.cancelled stored after the tail a drive began at, as `arbiter cancel`
// and client.Cancel append it. One loop per worker reads, every poll, the
// cancellations stored on each shard that has a run in flight (one batch
// direct get filtered to run.cancelled, from where it last read), whatever
// the number of runs in flight; with none in flight it reads nothing.
// What stops the run is the fence (the next append conflicts); the watch
// only stops the step in flight at once: the agent's model call, or the
// tool, whose context is cancelled.
type cancels struct {
	mu     sync.Mutex
	runs   map[string]*watched
	next   map[int]uint64 // per shard, the stream sequence to read from
	shards map[int]int    // per shard, how many runs in flight
}

type watched struct {
	shard  int
	from   uint64 // the first stream sequence after the drive's start
	cancel context.CancelFunc
	hit    bool
}

func newCancels() *cancels {
	return &cancels{runs: map[string]*watched{}, next: map[int]uint64{}, shards: map[int]int{}}
}

// watchCancel returns ctx cancelled as soon as run r is found cancelled
// after its tail, and a function that ends the watch and says whether it
// cancelled.
func (w *Worker) watchCancel(ctx context.Context, r *driver.Run) (context.Context, func() bool) {
	ctx, cancel := context.WithCancel(ctx)
	log := w.d.Log()
	e := &watched{shard: log.Shard(r.ID()), from: r.Tail().Seq + 1, cancel: cancel}
	c := w.cancels
	c.mu.Lock()
	c.runs[r.ID()] = e
	c.shards[e.shard]++
	if n, ok := c.next[e.shard]; !ok || e.from < n {
		// Read from this drive's start: nothing after it is missed, even
		// what the loop read before the run was registered.
		c.next[e.shard] = e.from
	}
	c.mu.Unlock()
	return ctx, func() bool {
		cancel()
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.runs, r.ID())
		if c.shards[e.shard]--; c.shards[e.shard] == 0 {
			delete(c.shards, e.shard)
			delete(c.next, e.shard)
		}
		return e.hit
	}
}

// watchCancels is the worker's loop over cancellations, until ctx is done.
func (w *Worker) watchCancels(ctx context.Context) {
	t := time.NewTicker(w.cfg.CancelPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.cancels.mu.Lock()
		todo := make(map[int]uint64, len(w.cancels.next))
		for k, n := range w.cancels.next {
			todo[k] = n
		}
		w.cancels.mu.Unlock()
		for k, from := range todo {
			w.readCancels(ctx, k, from)
		}
	}
}

// readCancels reads shard k's cancellations from stream sequence from on
// and cancels the drives they end.
func (w *Worker) readCancels(ctx context.Context, k int, from uint64) {
	log := w.d.Log()
	stream, filter := log.StreamName(k), log.KindFilter(k, events.RunCancelled)
	for {
		msgs, err := jsinbox.GetBatch(ctx, log.JetStream(), stream, from, jsinbox.MaxBatch, filter)
		if err != nil || len(msgs) == 0 {
			return
		}
		c := w.cancels
		c.mu.Lock()
		for _, m := range msgs {
			ev, err := events.Decode(m.Data)
			if err != nil {
				continue
			}
			if e := c.runs[ev.Run]; e != nil && e.shard == k && m.Sequence >= e.from && !e.hit {
				e.hit = true
				e.cancel()
				w.log.Info("run cancelled while driven; stopping the step in flight", "run", ev.Run)
			}
		}
		from = msgs[len(msgs)-1].Sequence + 1
		if n, ok := c.next[k]; ok && n < from {
			c.next[k] = from
		}
		c.mu.Unlock()
		if len(msgs) < 1024 {
			return
		}
	}
}
