package client

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/nats-io/nats.go/jetstream"
)

// The run list reads only what its page shows. A run's first event
// (run.created) and its end (run.finished, .failed, .cancelled) each sit on
// a subject of their own kind, so the newest runs of a shard are the last
// messages on the kind's subject filter. A batch direct get of one message
// from a sequence says how many matching messages follow it (the server's
// pending count), so the console finds where the newest n begin by
// widening a window back from the end, and reads only those: the cost
// follows the page's own span of the stream, not the stream's length.

// pendingHeader is the header of a batch direct get reply counting the
// matching messages after it.
const pendingHeader = "Nats-Num-Pending"

// matching returns how many messages on stream matching filter are stored
// at sequence seq or after.
func matching(ctx context.Context, log *events.Log, stream string, seq uint64, filter string) (uint64, error) {
	msgs, err := jsinbox.GetBatch(ctx, log.JetStream(), stream, seq, 1, filter)
	if err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	np, err := strconv.ParseUint(msgs[0].Header.Get(pendingHeader), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("batch get from %s: reply without a pending count (headers %v)", stream, msgs[0].Header)
	}
	return 1 + np, nil
}

// newest returns the newest n messages on shard k's stream matching filter
// stored before sequence before (0: the end), oldest first.
func newest(ctx context.Context, log *events.Log, k int, filter string, before uint64, n int) ([]*jetstream.RawStreamMsg, error) {
	stream := log.StreamName(k)
	hi, above := before, uint64(0)
	if hi == 0 {
		s, err := log.JetStream().Stream(ctx, stream)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", stream, err)
		}
		hi = s.CachedInfo().State.LastSeq + 1
	} else {
		var err error
		if above, err = matching(ctx, log, stream, hi, filter); err != nil {
			return nil, fmt.Errorf("list %s: %w", stream, err)
		}
	}
	want := uint64(n)
	// Widen a window back from hi until it holds n matches (or reaches the
	// start), then narrow it while it holds far more than n.
	var lo, count uint64
	for w := 16 * want; ; w *= 4 {
		lo = 1
		if hi > w+1 {
			lo = hi - w
		}
		m, err := matching(ctx, log, stream, lo, filter)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", stream, err)
		}
		count = m - min(m, above)
		if count >= want || lo == 1 {
			break
		}
	}
	for count > 4*want && hi-lo > 1 {
		mid := lo + (hi-lo)/2
		m, err := matching(ctx, log, stream, mid, filter)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", stream, err)
		}
		c := m - min(m, above)
		if c < want {
			break
		}
		lo, count = mid, c
	}
	var out []*jetstream.RawStreamMsg
	for seq := lo; seq < hi; {
		msgs, err := jsinbox.GetBatch(ctx, log.JetStream(), stream, seq, int(min(count+1, 1024)), filter)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", stream, err)
		}
		for _, m := range msgs {
			if m.Sequence < hi {
				out = append(out, m)
			}
		}
		if len(msgs) == 0 || msgs[len(msgs)-1].Sequence+1 >= hi {
			break
		}
		seq = msgs[len(msgs)-1].Sequence + 1
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}

// cursor is where a listing goes on: per shard, the stream sequence the
// next page reads before (0: the end).
type cursor []uint64

func parseCursor(s string, shards int) (cursor, error) {
	c := make(cursor, shards)
	if s == "" {
		return c, nil
	}
	parts := strings.Split(s, ".")
	if len(parts) != shards {
		return nil, fmt.Errorf("%w: cursor %q has %d positions, the log has %d shards", ErrBadFilter, s, len(parts), shards)
	}
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: cursor %q: position %d is not a number", ErrBadFilter, s, i)
		}
		c[i] = v
	}
	return c, nil
}

func (c cursor) String() string {
	parts := make([]string, len(c))
	for i, v := range c {
		parts[i] = strconv.FormatUint(v, 10)
	}
	return strings.Join(parts, ".")
}

// hit is one message found by the index, with its shard.
type hit struct {
	shard int
	msg   *jetstream.RawStreamMsg
}

// newestAll merges the newest n messages of kind across every shard before
// c, newest first, and says whether older ones are left.
func newestAll(ctx context.Context, log *events.Log, kind events.Kind, c cursor, n int) ([]hit, bool, error) {
	var all []hit
	for k := range c {
		if c[k] == 1 { // nothing before the first message
			continue
		}
		msgs, err := newest(ctx, log, k, log.KindFilter(k, kind), c[k], n+1)
		if err != nil {
			return nil, false, err
		}
		for _, m := range msgs {
			all = append(all, hit{k, m})
		}
	}
	slices.SortFunc(all, func(a, b hit) int {
		if d := b.msg.Time.Compare(a.msg.Time); d != 0 {
			return d
		}
		return cmp.Compare(b.msg.Sequence, a.msg.Sequence)
	})
	if len(all) > n {
		return all[:n], true, nil
	}
	return all, false, nil
}

// after returns c moved past hits: each shard's position is the oldest hit
// read from it.
func (c cursor) after(hits []hit) cursor {
	next := slices.Clone(c)
	for _, h := range hits {
		if next[h.shard] == 0 || h.msg.Sequence < next[h.shard] {
			next[h.shard] = h.msg.Sequence
		}
	}
	return next
}
