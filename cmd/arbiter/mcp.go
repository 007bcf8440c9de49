package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/arbiter-run/arbiter/mcp"
)

// runMCP is "arbiter mcp tools|pin --config FILE": the review and pinning
// of a worker config's MCP servers. The logic is the mcp package's.
func runMCP(ctx context.Context, args []string, out io.Writer) error {
	a, h := helpOf("mcp")
	fs := newFlags("mcp", a, h)
	path := fs.String("config", "", "the worker config file whose mcp section names the servers (required)")
	rest, err := parse(fs, args, "tools|pin")
	if err != nil {
		return err
	}
	if *path == "" {
		return usageError{"--config is required"}
	}
	cfg, err := mcp.LoadConfig(*path)
	if err != nil {
		return err
	}
	opts := mcp.Options{Stderr: os.Stderr}
	switch rest[0] {
	case "tools":
		rs, err := mcp.Inspect(ctx, cfg, opts)
		if err != nil {
			return err
		}
		return mcp.WriteReviews(out, rs)
	case "pin":
		rs, err := mcp.PinAll(ctx, cfg, opts)
		if err != nil {
			return err
		}
		if err := mcp.WriteReviews(out, rs); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nwrote %s: every tool listed above is pinned as it is now (the PIN column is against the previous lock)\n", cfg.Lock)
		return nil
	}
	return usageError{fmt.Sprintf("unknown mcp command %q (want tools or pin)", rest[0])}
}
