package console

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/arbiter-run/arbiter/internal/visible"
	"github.com/arbiter-run/arbiter/projector"
)

// Pending is an approval waiting for a decision, as the live page lists it.
type Pending struct {
	Run      string             `json:"run"`
	Approval projector.Approval `json:"-"`
	ID       string             `json:"id"`
	Tool     string             `json:"tool"`
	Kind     string             `json:"kind"`
	Reason   string             `json:"reason"`
	Since    time.Time          `json:"since"`
	Status   projector.Status   `json:"-"`
}

// visible is p with its text escaped for display (internal/visible): the
// live list's script shows it with textContent, which would show a
// bidirectional override or an invisible character as one, after the
// JSON decoding that undoes any escape made in the JSON text itself.
func (p Pending) visible() Pending {
	p.Run, p.ID, p.Tool, p.Kind, p.Reason = visible.String(p.Run), visible.String(p.ID), visible.String(p.Tool), visible.String(p.Kind), visible.String(p.Reason)
	return p
}

// pendingFeed follows every shard's approval and end events with batch
// direct gets from the last one read (no consumer), and keeps the
// approvals that wait.
// A run an approval event touched is folded again to learn where it
// stands: only a worker's record makes an approval decided, so the feed
// shows what the fleet has recorded.
type pendingFeed struct {
	log    *events.Log
	client *client.Client
	poll   time.Duration

	filters []feedFilter

	mu      sync.Mutex
	next    []uint64 // per filter, the stream sequence to read from
	waiting map[string]Pending
	version uint64
	changed chan struct{} // closed and replaced on every change
	err     error         // the last read error, shown on the page
	ready   bool
}

// feedFilter is one subject filter the feed follows on one stream.
type feedFilter struct{ stream, subject string }

func newPendingFeed(c *client.Client, poll time.Duration) *pendingFeed {
	log := c.Log()
	var filters []feedFilter
	for k, approvals := range log.ApprovalFilters() {
		stream := log.StreamName(k)
		filters = append(filters, feedFilter{stream, approvals})
		for _, end := range []events.Kind{events.RunFinished, events.RunFailed, events.RunCancelled} {
			filters = append(filters, feedFilter{stream, log.KindFilter(k, end)})
		}
	}
	next := make([]uint64, len(filters))
	for i := range next {
		next[i] = 1
	}
	return &pendingFeed{log: log, client: c, poll: poll, filters: filters, next: next, waiting: map[string]Pending{}, changed: make(chan struct{})}
}

func (p *pendingFeed) run(ctx context.Context) error {
	t := time.NewTicker(p.poll)
	defer t.Stop()
	for {
		err := p.step(ctx)
		if ctx.Err() != nil {
			return nil
		}
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// step reads the approval and end events stored since the last step and
// refolds the runs they touched: a run stops waiting with an approval
// event (a decision recorded, an expiry) or an end (a cancellation).
func (p *pendingFeed) step(ctx context.Context) error {
	touched := map[string]bool{}
	for i, f := range p.filters {
		p.mu.Lock()
		seq := p.next[i]
		p.mu.Unlock()
		for {
			msgs, err := jsinbox.GetBatch(ctx, p.log.JetStream(), f.stream, seq, jsinbox.MaxBatch, f.subject)
			if err != nil {
				return err
			}
			for _, m := range msgs {
				if e, err := events.Decode(m.Data); err == nil {
					touched[e.Run] = true
				}
				seq = m.Sequence + 1
			}
			if len(msgs) < 1024 {
				break
			}
		}
		p.mu.Lock()
		p.next[i] = seq
		p.mu.Unlock()
	}
	changed := false
	for run := range touched {
		v, _, err := p.client.Read(ctx, run)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		item, waits := Pending{}, false
		if err == nil {
			if a := v.PendingApproval(); a != nil && a.State == projector.Pending && v.Run.Status == projector.Waiting {
				item = Pending{Run: run, ID: a.ID, Tool: a.Tool, Kind: a.Kind, Reason: a.Reason, Since: a.Requested}
				waits = true
			}
		}
		p.mu.Lock()
		old, had := p.waiting[run]
		switch {
		case waits && (!had || old.ID != item.ID):
			p.waiting[run] = item
			changed = true
		case !waits && had:
			delete(p.waiting, run)
			changed = true
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if changed || !p.ready {
		p.ready = true
		p.version++
		close(p.changed)
		p.changed = make(chan struct{})
	}
	return nil
}

// snapshot returns the waiting approvals, oldest first, the feed's
// version, a channel closed at the next change, and the last read error.
func (p *pendingFeed) snapshot() ([]Pending, uint64, <-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Pending, 0, len(p.waiting))
	for _, w := range p.waiting {
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b Pending) int {
		if d := a.Since.Compare(b.Since); d != 0 {
			return d
		}
		return cmp.Compare(a.Run, b.Run)
	})
	return out, p.version, p.changed, p.err
}
