package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// Filter selects runs for the list. The zero Filter selects every run.
type Filter struct {
	// Status is one of the projector's statuses, or empty for any.
	Status projector.Status
	// Agent is the agent that drives the run, exactly.
	Agent string
	// Actor is an operator's public key: runs with an approval it decided.
	Actor string
	// Since and Until bound the run's creation time (zero: unbounded).
	Since, Until time.Time
}

// Row is one run of a list: its view, or why it cannot be read.
type Row struct {
	// ID is the run's id; View its folded view (when Err is nil).
	ID   string
	View projector.View
	// Err is set when the run's events do not verify or fold: it is shown
	// as BROKEN, never hidden.
	Err error
}

// Page is one page of the run list, newest first.
type Page struct {
	// Rows are the page's runs, newest first.
	Rows []Row
	// Next is the cursor of the next page, empty on the last.
	Next string
	// Scanned counts the runs read to fill the page; Limited says the
	// page stopped at the scan limit before it was full.
	Scanned int
	Limited bool
}

// endKind is the event kind that ends a run in status st, if st is an end.
func endKind(st projector.Status) (events.Kind, bool) {
	switch st {
	case projector.Completed:
		return events.RunFinished, true
	case projector.Failed:
		return events.RunFailed, true
	case projector.Cancelled:
		return events.RunCancelled, true
	}
	return "", false
}

// Validate reports a filter that selects nothing by construction.
func (f Filter) Validate() error {
	switch f.Status {
	case "", projector.Running, projector.Waiting, projector.Completed, projector.Failed, projector.Cancelled:
	default:
		return fmt.Errorf("%w: unknown status %q (want RUNNING, WAITING_FOR_APPROVAL, COMPLETED, FAILED or CANCELLED)", ErrBadFilter, f.Status)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return fmt.Errorf("%w: until %s is before since %s", ErrBadFilter, f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	return nil
}

func (f Filter) match(r Row) bool {
	if r.Err != nil {
		// A broken run is shown under any filter that does not need its
		// view: hiding it would hide that it cannot be read.
		return f.Agent == "" && f.Actor == "" && f.Status == ""
	}
	v := r.View
	switch {
	case f.Status != "" && v.Run.Status != f.Status,
		f.Agent != "" && v.Run.Agent != f.Agent,
		!f.Since.IsZero() && v.Run.Created.Before(f.Since),
		!f.Until.IsZero() && v.Run.Created.After(f.Until):
		return false
	}
	if f.Actor == "" {
		return true
	}
	for _, a := range v.Approvals {
		if a.Decision != nil && a.Decision.Operator == f.Actor {
			return true
		}
	}
	return false
}

// ErrBadFilter marks a listing that cannot be made: an unknown status, a
// time range that ends before it starts, a malformed cursor, a page size
// out of range.
var ErrBadFilter = errors.New("bad run listing")

// List returns the page of pageSize runs (1..500) selected by f that
// starts at cursor ("" for the newest; a page's Next for the one after).
// Unfiltered, or filtered by an ended status, it reads only the runs the
// page shows (the newest run.created, or end, messages: see newest).
// Other filters fold runs newest first until the page is full or
// scanLimit runs were read (0: 20 pages' worth); the page then says so
// and its cursor goes on from there. Errors wrap [ErrBadFilter] for a
// listing that cannot be made.
func (cl *Client) List(ctx context.Context, f Filter, cur string, pageSize, scanLimit int) (Page, error) {
	log := cl.log
	if pageSize < 1 || pageSize > 500 {
		return Page{}, fmt.Errorf("%w: page size %d (want 1..500)", ErrBadFilter, pageSize)
	}
	if scanLimit <= 0 {
		scanLimit = 20 * pageSize
	}
	if err := f.Validate(); err != nil {
		return Page{}, err
	}
	c, err := parseCursor(cur, log.Config().Shards)
	if err != nil {
		return Page{}, err
	}
	kind, ended := endKind(f.Status)
	if !ended {
		kind = events.RunCreated
	}
	n := pageSize
	var page Page
	for {
		hits, more, err := newestAll(ctx, log, kind, c, n)
		if err != nil {
			return Page{}, err
		}
		rows := cl.fold(ctx, hits)
		for i, r := range rows {
			page.Scanned++
			if f.match(r) {
				page.Rows = append(page.Rows, r)
			}
			// Newest created first: once one is older than Since, all the
			// rest are. (An end index is in order of ending, not creation.)
			stop := !ended && !f.Since.IsZero() && r.Err == nil && r.View.Run.Created.Before(f.Since)
			if len(page.Rows) == n || page.Scanned >= scanLimit || stop {
				if (i < len(rows)-1 || more) && !stop {
					page.Next = c.after(hits[:i+1]).String()
					page.Limited = len(page.Rows) < n
				}
				return page, nil
			}
		}
		if !more {
			return page, nil
		}
		c = c.after(hits)
	}
}

// fold reads and folds the runs of hits, up to 32 at a time: each read is
// one round trip, so a page costs about two round trips, not fifty.
func (cl *Client) fold(ctx context.Context, hits []hit) []Row {
	log := cl.log
	rows := make([]Row, len(hits))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i, h := range hits {
		e, err := events.Decode(h.msg.Data)
		if err == nil {
			err = log.CheckStored(h.msg.Subject, h.msg.Header, e)
		}
		if err != nil {
			rows[i] = Row{ID: h.msg.Subject, Err: fmt.Errorf("message %d on %s: %w", h.msg.Sequence, h.msg.Subject, err)}
			continue
		}
		rows[i].ID = e.Run
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			rows[i].View, _, rows[i].Err = cl.Read(ctx, e.Run)
		}()
	}
	wg.Wait()
	return rows
}
