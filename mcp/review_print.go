package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
)

// Inspect connects to every server in cfg and reviews what each lists
// against the lock file cfg.Lock (a lock file that does not exist yet pins
// nothing: every tool is new).
func Inspect(ctx context.Context, cfg Config, opts Options) ([]Review, error) {
	lock, err := readLockOrEmpty(cfg.Lock)
	if err != nil {
		return nil, err
	}
	s, err := Connect(ctx, cfg, lock, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.Reviews(), nil
}

// PinAll connects to every server in cfg and writes the lock file cfg.Lock
// pinning every tool each lists now. It returns what it pinned, reviewed
// against the lock it replaced, so the caller can show what changed.
func PinAll(ctx context.Context, cfg Config, opts Options) ([]Review, error) {
	old, err := readLockOrEmpty(cfg.Lock)
	if err != nil {
		return nil, err
	}
	s, err := Connect(ctx, cfg, old, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	lock, err := s.Pins()
	if err != nil {
		return nil, err
	}
	if err := WriteLock(cfg.Lock, lock); err != nil {
		return nil, err
	}
	return s.Reviews(), nil
}

func readLockOrEmpty(path string) (Lock, error) {
	l, err := ReadLock(path)
	if errors.Is(err, os.ErrNotExist) {
		return Lock{Version: LockVersion}, nil
	}
	return l, err
}

// WriteReviews prints reviews as a table: the name offered, the status
// against the lock, the class, whether it is offered, and what changed or
// why not.
func WriteReviews(w io.Writer, rs []Review) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOOL\tPIN\tCLASS\tOFFERED\tNOTES")
	for _, r := range rs {
		class := r.Class
		if class == "" {
			class = "-"
		}
		offered := "no"
		if r.Offered {
			offered = "yes"
		}
		notes := joinNonEmpty("; ", r.Change, r.Hint, r.Note)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.Status, class, offered, notes)
	}
	return tw.Flush()
}

func joinNonEmpty(sep string, parts ...string) string {
	out := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		if out != "" {
			out += sep
		}
		out += p
	}
	return out
}
