package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/nats-io/nats.go/jetstream"
)

// checker is one Check in progress.
type checker struct {
	log    *events.Log
	policy policy.Policy
	sel    Selection
	opts   Options
	fn     func(Result) error

	checkingID string // the given policy's id ("" for none)
	against    string // the recorded id evaluations must carry to be re-checked
	tool       string

	runs  map[string]*runState
	specs map[string]events.ToolSpec // specs verified so far, by hash, across runs
	sum   Summary
	// from and to bound the stream sequences reported on the shard being
	// read; events outside them are only folded.
	from, to uint64
	prog     Progress
	prefixes []string // subject prefix by shard
}

// errStop ends a scan that reached the end of its selection.
var errStop = errors.New("replay: end of selection")

const progressEvery = 8192

func (c *checker) check(ctx context.Context) error {
	c.prog.Shards = c.log.Config().Shards
	if len(c.sel.Runs) > 0 {
		for _, run := range uniq(c.sel.Runs) {
			if err := c.readRun(ctx, run); err != nil {
				return err
			}
		}
		return nil
	}
	for k := 0; k < c.log.Config().Shards; k++ {
		if err := c.scanShard(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

func uniq(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// scanShard reads shard k's stream once over the selected stretch.
func (c *checker) scanShard(ctx context.Context, k int) error {
	stream := c.log.StreamName(k)
	s, err := c.log.JetStream().Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("replay %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("replay %s: %w", stream, err)
	}
	from, to := max(c.sel.FromSeq, 1), info.State.LastSeq
	if c.sel.ToSeq > 0 {
		to = min(to, c.sel.ToSeq)
	}
	if !c.sel.Since.IsZero() && from <= to {
		seq, err := c.firstAtOrAfter(ctx, stream, from, to+1, c.sel.Since.Add(-c.opts.ClockSkew))
		if err != nil {
			return err
		}
		from = seq
	}
	if !c.sel.Until.IsZero() && from <= to {
		seq, err := c.firstAtOrAfter(ctx, stream, from, to+1, c.sel.Until.Add(c.opts.ClockSkew))
		if err != nil {
			return err
		}
		to = seq - 1
	}
	c.prog.Shard, c.prog.Last = k, to
	if info.State.Msgs == 0 || from > to {
		return nil
	}
	c.from, c.to = from, to
	if err := c.pipeline(ctx, k, from, to); err != nil {
		return err
	}
	if err := c.leaveAll(); err != nil {
		return err
	}
	c.progress(to)
	return nil
}

// batch is how many messages move between the stages of a scan at once.
const batch = 256

// pipeline reads shard k from stream sequence from to to in three stages,
// so that reading, decoding and checking overlap: the log's ordered
// consumer, a goroutine that decodes and hashes, and this goroutine, which
// folds and evaluates in stream order. Decoding is most of the cost of a
// check; on more than one core it runs beside the rest.
func (c *checker) pipeline(parent context.Context, k int, from, to uint64) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	raws := make(chan []events.RawRecord, 8)
	recs := make(chan []record, 8)
	scanned := make(chan error, 1)
	go func() {
		defer close(raws)
		var b []events.RawRecord
		send := func() error {
			select {
			case raws <- b:
				b = nil
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := c.log.Scan(ctx, k, from, func(r events.RawRecord) error {
			if r.StreamSeq > to {
				return errStop
			}
			if b = append(b, r); len(b) == batch {
				return send()
			}
			return nil
		})
		if (err == nil || errors.Is(err, errStop)) && len(b) > 0 {
			err = send()
		}
		scanned <- err
	}()
	go func() {
		defer close(recs)
		for b := range raws {
			out := make([]record, len(b))
			for i, r := range b {
				out[i] = decode(r)
			}
			select {
			case recs <- out:
			case <-ctx.Done():
			}
		}
	}()
	var err error
	for b := range recs {
		if err == nil {
			err = parent.Err()
		}
		for _, rec := range b {
			if err == nil {
				err = c.decoded(ctx, rec, true)
			}
		}
		if err != nil {
			cancel() // stop reading; drain what is in flight
		}
	}
	if serr := <-scanned; err == nil && serr != nil && !errors.Is(serr, errStop) {
		err = serr
	}
	return err
}

// firstAtOrAfter returns the first stream sequence in [lo, hi) whose event
// records a time at or after t (hi if none), by binary search: event times
// rise with the stream but for the skew of workers' clocks, which the caller
// has widened t by. An event whose time cannot be read counts as late, so
// the search errs towards reading more.
func (c *checker) firstAtOrAfter(ctx context.Context, stream string, lo, hi uint64, t time.Time) (uint64, error) {
	for lo < hi {
		mid := lo + (hi-lo)/2
		at, seq, err := c.timeAt(ctx, stream, mid)
		if err != nil {
			return 0, err
		}
		if seq >= hi || !at.Before(t) {
			hi = mid
		} else {
			lo = seq + 1
		}
	}
	return lo, nil
}

// timeAt returns the recorded time of the first event stored at or after
// seq, and its sequence.
func (c *checker) timeAt(ctx context.Context, stream string, seq uint64) (time.Time, uint64, error) {
	msgs, err := jsinbox.GetBatch(ctx, c.log.JetStream(), stream, seq, 1, "")
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("replay %s: read seq %d: %w", stream, seq, err)
	}
	if len(msgs) == 0 {
		return time.Time{}, ^uint64(0), nil
	}
	m := msgs[0]
	e, err := events.Decode(m.Data)
	if err != nil {
		return time.Time{}, m.Sequence, nil
	}
	return e.Time, m.Sequence, nil
}

// readRun reads one run from its first event to its last, reporting what
// the selection's sequence and time bounds let through.
func (c *checker) readRun(ctx context.Context, run string) error {
	if err := events.ValidRunID(run); err != nil {
		return fmt.Errorf("replay run %q: %w", run, err)
	}
	k := c.log.Shard(run)
	js := c.log.JetStream()
	b, err := jsinbox.For(js.Conn())
	if err != nil {
		return fmt.Errorf("replay run %s: %w", run, err)
	}
	// The server's subject and sequence, never a stored message's own
	// headers (jsinbox.ErrForgedHeader).
	last, err := b.GetLast(ctx, jsinbox.APIPrefix(js), c.log.StreamName(k), c.log.RunFilter(run))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("replay run %s: %w", run, events.ErrNoRun)
	}
	if err != nil {
		return fmt.Errorf("replay run %s: %w", run, err)
	}
	c.prog.Shard, c.prog.Last = k, last.Sequence
	c.from, c.to = max(c.sel.FromSeq, 1), last.Sequence
	if c.sel.ToSeq > 0 {
		c.to = min(c.to, c.sel.ToSeq)
	}
	err = c.readRaw(ctx, run, 1, c.to, func(r events.RawRecord) error { return c.event(ctx, r, true) })
	if err != nil {
		return err
	}
	if err := c.leaveAll(); err != nil {
		return err
	}
	c.progress(last.Sequence)
	return nil
}

// readRaw calls fn with every stored message of run from stream sequence
// from up to and including until, undecoded, in order.
func (c *checker) readRaw(ctx context.Context, run string, from, until uint64, fn func(events.RawRecord) error) error {
	stream := c.log.StreamName(c.log.Shard(run))
	next := from
	for next <= until {
		msgs, err := jsinbox.GetBatch(ctx, c.log.JetStream(), stream, next, 256, c.log.RunFilter(run))
		if err != nil {
			return fmt.Errorf("replay run %s: %w", run, err)
		}
		got := 0
		for _, m := range msgs {
			if m.Sequence > until {
				return nil
			}
			got++
			next = m.Sequence + 1
			if err := fn(events.RawRecord{Data: m.Data, Subject: m.Subject, Header: m.Header, Stream: stream, StreamSeq: m.Sequence}); err != nil {
				return err
			}
		}
		if got == 0 {
			return nil
		}
	}
	return nil
}

func (c *checker) progress(seq uint64) {
	if c.opts.Progress == nil {
		return
	}
	c.prog.Seq, c.prog.Events, c.prog.Evaluations = seq, c.sum.Events, c.sum.Evaluations
	c.opts.Progress(c.prog)
}
