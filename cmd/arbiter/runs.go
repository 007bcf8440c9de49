package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/projector"
)

// runRuns lists runs newest first, a page at a time, with the console's
// filters (client.Client.List): it reads only the runs it prints.
func runRuns(ctx context.Context, args []string, out io.Writer) error {
	var status, agent, actor, since, until, after string
	var page int
	c, _, err := setup(ctx, "runs", args, func(fs *flag.FlagSet) {
		fs.StringVar(&status, "status", "", "only runs in this status (RUNNING, WAITING_FOR_APPROVAL, COMPLETED, FAILED, CANCELLED)")
		fs.StringVar(&agent, "agent", "", "only runs of this agent")
		fs.StringVar(&actor, "actor", "", "only runs with an approval decided by this operator key (U…)")
		fs.StringVar(&since, "since", "", "only runs created at or after this time (RFC 3339, UTC)")
		fs.StringVar(&until, "until", "", "only runs created at or before this time (RFC 3339, UTC)")
		fs.StringVar(&after, "after", "", "the cursor a previous page printed: list the runs older than it")
		fs.IntVar(&page, "page", 50, "runs per page (1..500)")
	})
	if err != nil {
		return err
	}
	defer c.close()
	f := client.Filter{Status: projector.Status(status), Agent: agent, Actor: actor}
	for _, t := range []struct {
		flag, v string
		into    *time.Time
	}{{"--since", since, &f.Since}, {"--until", until, &f.Until}} {
		if t.v == "" {
			continue
		}
		if *t.into, err = time.Parse(time.RFC3339, t.v); err != nil {
			return usageError{fmt.Sprintf("%s %q: want an RFC 3339 time like 2026-12-01T15:04:05Z", t.flag, t.v)}
		}
	}
	p, err := c.cl.List(ctx, f, after, page, 0)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%-32s %-22s %-24s %5s  %s\n", "RUN", "STATUS", "REASON", "STEPS", "UPDATED")
	for _, r := range p.Rows {
		if r.Err != nil {
			fmt.Fprintf(out, "%-32s %-22s %v\n", r.ID, "UNREADABLE", r.Err)
			continue
		}
		v := r.View.Run
		fmt.Fprintf(out, "%-32s %-22s %-24s %5d  %s\n", r.ID, v.Status, v.Reason, v.Steps, v.Updated.Format(time.RFC3339))
	}
	if p.Limited {
		fmt.Fprintf(out, "(%d runs read, fewer than a page matched; older runs may match)\n", p.Scanned)
	}
	if p.Next != "" {
		fmt.Fprintf(out, "more: arbiter runs --after %s\n", p.Next)
	}
	return nil
}
