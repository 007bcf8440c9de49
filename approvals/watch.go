package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/nats-io/nats.go/jetstream"
)

// Notice is one approval event as a subscriber sees it.
type Notice struct {
	Event     events.Event
	Subject   string
	Stream    string
	StreamSeq uint64
	// Err is set when the stored message cannot be trusted: it does not
	// decode, or it is stored on a subject its kind does not belong on
	// (see [events.Log.CheckStored]). Report it; never act on it.
	Err error
}

// WatchPoll is how long a watcher that has read every approval event
// stored waits before asking again.
const WatchPoll = 200 * time.Millisecond

// ErrState marks a watcher state file that cannot be used: unreadable,
// malformed, or written for another log layout.
var ErrState = errors.New("watch state")

// Watch calls fn for every approval event of every run (requested, granted,
// denied, expired, refused), in order per shard, until ctx is done or fn
// returns an error. It reads with batch direct gets filtered to approval
// subjects, asking again every [WatchPoll] once caught up: it needs no
// consumer on the server, so an operator's NATS user needs no consumer API
// (ADR 0008).
//
// With a state file, the watcher is durable: the file keeps, per shard, the
// stream sequence of the last event fn handled (returned nil for), written
// after each one. A watcher started after an approval was requested still
// receives it, and one that restarts with the same file resumes after the
// last event it handled, so each event is handed once to a watcher that
// handled it (an event whose fn failed is handed again on restart). The file
// is created when missing; one that is malformed or was written for a log
// with another layout is an error wrapping [ErrState]. Without a state file
// Watch reads every approval event from the start of the log and keeps
// following.
func Watch(ctx context.Context, log *events.Log, state string, fn func(Notice) error) error {
	pos, err := loadPosition(state, log)
	if err != nil {
		return err
	}
	filters := log.ApprovalFilters()
	errc := make(chan error, len(filters))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for k, filter := range filters {
		go func() { errc <- watchShard(ctx, log, pos, k, filter, fn) }()
	}
	var first error
	for range filters {
		if err := <-errc; err != nil && first == nil && !errors.Is(err, context.Canceled) {
			first = err
			cancel()
		}
	}
	return first
}

func watchShard(ctx context.Context, log *events.Log, pos *position, k int, filter string, fn func(Notice) error) error {
	stream := log.StreamName(k)
	s, err := log.JetStream().Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("watch approvals on %s: %w", stream, err)
	}
	next := pos.after(k) + 1
	idle := false
	for {
		// A filtered get costs the server a look at everything stored after
		// next: once idle, move next past what is known to hold no
		// approval event. Only on one replica, whose info and gets agree;
		// a follower answering a get may lag the leader's info.
		var stored uint64
		if idle {
			if info, err := s.Info(ctx); err == nil && info.Config.Replicas == 1 {
				stored = info.State.LastSeq
			}
		}
		msgs, err := jsinbox.GetBatch(ctx, log.JetStream(), stream, next, jsinbox.MaxBatch, filter)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("watch approvals on %s from %d: %w", stream, next, err)
		}
		for _, m := range msgs {
			if err := fn(notice(log, m, stream)); err != nil {
				return err
			}
			// Saved even when fn has just cancelled the watch: the event
			// was handled.
			if err := pos.handled(k, m.Sequence); err != nil {
				return err
			}
			next = m.Sequence + 1
		}
		if idle = len(msgs) == 0; !idle {
			continue
		}
		next = max(next, stored+1)
		t := time.NewTimer(WatchPoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

func notice(log *events.Log, m *jetstream.RawStreamMsg, stream string) Notice {
	n := Notice{Subject: m.Subject, Stream: stream, StreamSeq: m.Sequence}
	ev, err := events.Decode(m.Data)
	if err == nil {
		err = log.CheckStored(m.Subject, m.Header, ev)
	}
	n.Event, n.Err = ev, err
	return n
}

// position is a durable watcher's place in each shard, and the file it is
// kept in (none: nothing is kept).
type position struct {
	path string
	mu   sync.Mutex
	st   stateFile
}

// stateFile is the file's content. Stream and Shards say which log layout
// the sequences belong to: they mean nothing in another.
type stateFile struct {
	Stream string   `json:"stream"`
	Shards int      `json:"shards"`
	Seqs   []uint64 `json:"seqs"`
}

func loadPosition(path string, log *events.Log) (*position, error) {
	cfg := log.Config()
	p := &position{path: path, st: stateFile{Stream: cfg.Stream, Shards: cfg.Shards, Seqs: make([]uint64, cfg.Shards)}}
	if path == "" {
		return p, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrState, path, err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%w %s: not a watch state file: %w", ErrState, path, err)
	}
	if st.Stream != cfg.Stream || st.Shards != cfg.Shards || len(st.Seqs) != cfg.Shards {
		return nil, fmt.Errorf("%w %s: written for stream %q with %d shards (%d positions), the log is %q with %d shards: use another file",
			ErrState, path, st.Stream, st.Shards, len(st.Seqs), cfg.Stream, cfg.Shards)
	}
	p.st = st
	return p, nil
}

func (p *position) after(k int) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.st.Seqs[k]
}

// handled records that shard k's event at seq was handled, and writes the
// file: to a temporary file first, synced, then renamed over the old one,
// so a crash leaves the old position or the new one, never a torn file.
func (p *position) handled(k int, seq uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st.Seqs[k] = seq
	if p.path == "" {
		return nil
	}
	b, err := json.Marshal(p.st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p.path), filepath.Base(p.path)+".*")
	if err != nil {
		return fmt.Errorf("save watch state %s: %w", p.path, err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p.path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("save watch state %s: %w", p.path, err)
	}
	return nil
}
