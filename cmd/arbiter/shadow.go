package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/shadow"
)

// errShadowWidens: the shadow policy would have let through what the
// enforcing one did not (exit 1, for a CI gate).
var errShadowWidens = errors.New("the shadow policy widens")

// runShadow is `arbiter shadow RUN | --since T`: see package shadow.
func runShadow(ctx context.Context, args []string, out io.Writer) error {
	var since string
	var asJSON bool
	pos := []string{"RUN"}
	for _, a := range args {
		if a == "--since" || a == "-since" || strings.HasPrefix(a, "--since=") || strings.HasPrefix(a, "-since=") {
			pos = nil
		}
	}
	c, rest, err := setup(ctx, "shadow", args, func(fs *flag.FlagSet) {
		fs.StringVar(&since, "since", "", "report every evaluation recorded at or after this time (RFC 3339) instead of one run")
		fs.BoolVar(&asJSON, "json", false, "one JSON object per finding, then the summary")
	}, pos...)
	if err != nil {
		return err
	}
	defer c.close()
	report := func(f shadow.Finding) error {
		if asJSON {
			b, _ := json.Marshal(f)
			fmt.Fprintf(out, "%s\n", b)
			return nil
		}
		fmt.Fprintf(out, "%s run %s step %d %s: %s (recorded) → %s (shadow): %s\n",
			f.Change, f.Run, f.Step, f.Tool, f.Recorded, f.Shadow, f.ShadowReason)
		return nil
	}
	var sum shadow.Summary
	if pos == nil {
		t, perr := time.Parse(time.RFC3339, since)
		if perr != nil {
			return usageError{fmt.Sprintf("--since %q: want an RFC 3339 time such as 2026-03-01T09:00:00Z", since)}
		}
		sum, err = shadow.Since(ctx, c.log, t, report)
	} else {
		sum, err = shadow.Runs(ctx, c.log, rest, report)
	}
	if err != nil {
		return err
	}
	if asJSON {
		b, _ := json.Marshal(sum)
		fmt.Fprintf(out, "%s\n", b)
	} else {
		fmt.Fprintf(out, "%d evaluations, %d shadowed: %d same, %d widen, %d narrow, %d changed\n",
			sum.Evaluations, sum.Shadowed, sum.Same, sum.Widens, sum.Narrows, sum.Changed)
	}
	if sum.Widens > 0 {
		return errShadowWidens
	}
	return nil
}
