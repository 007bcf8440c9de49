package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/gateway"
	"github.com/arbiter-run/arbiter/mcp"
)

// runGateway is "arbiter gateway --config FILE": an MCP server in front of
// the file's upstream servers, on stdio, or on --http ADDR with the bearer
// token in $--token-env. The logic is the gateway package's; stdout is the
// MCP channel on stdio, so everything else goes to stderr.
func runGateway(ctx context.Context, args []string, out io.Writer) error {
	a, h := helpOf("gateway")
	fs := newFlags("gateway", a, h)
	c := &conn{role: "worker"} // it records runs as a worker does
	c.flags(fs)
	path := fs.String("config", "", "the gateway config file: mcp servers, policy, operators (required)")
	addr := fs.String("http", "", "serve streamable HTTP on this address (\"127.0.0.1:8765\") instead of stdio")
	tokenEnv := fs.String("token-env", "ARBITER_GATEWAY_TOKEN", "with --http: the environment variable holding the bearer token hosts must send")
	var extra []string
	fs.Func("operator", "an operator's public nkey (U…) whose signed decisions are accepted, besides the file's; repeatable", func(k string) error {
		if err := approvals.ParseOperator(k); err != nil {
			return err
		}
		extra = append(extra, k)
		return nil
	})
	run := fs.String("run", "", "the run id of the first session: resumed if it exists (a host restarted carries on), created otherwise")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return usageError{"--config is required"}
	}
	file, err := gateway.LoadFile(*path)
	if err != nil {
		return err
	}
	var token string
	if *addr != "" {
		if token = os.Getenv(*tokenEnv); token == "" {
			return usageError{fmt.Sprintf("--http needs a bearer token in $%s", *tokenEnv)}
		}
	}
	lock, err := mcp.ReadLock(file.MCP.Lock)
	if err != nil {
		return fmt.Errorf("mcp: %w (review with arbiter mcp tools, then write it with arbiter mcp pin)", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// A tool that changes upstream while the gateway runs is withheld
	// (mcp.Set.Withheld): hosts are told to list the tools again.
	var told atomic.Pointer[gateway.Gateway]
	onChange := func(mcp.Review) {
		if gw := told.Load(); gw != nil {
			gw.ToolsChanged()
		}
	}
	set, err := mcp.Connect(ctx, file.MCP, lock, mcp.Options{Logger: logger, Stderr: os.Stderr, OnChange: onChange})
	if err != nil {
		return err
	}
	defer set.Close()
	if err := c.open(ctx); err != nil {
		return err
	}
	defer c.close()
	p, _ := file.PolicyOf()
	ops, _ := file.OperatorsOf()
	for _, k := range extra {
		if _, ok := ops[k]; !ok {
			ops[k] = "operator " + k[:8]
		}
	}
	ttl, wait := file.Durations()
	limits, err := file.Limits.Limits() // checked by LoadFile
	if err != nil {
		return err
	}
	gw, err := gateway.New(gateway.Config{
		Gate:  gate.Config{Log: c.log, Policy: p, Operators: ops, ApprovalTTL: ttl, Logger: logger, Withheld: set.Withheld, Limits: limits},
		Tools: set.Tools(), Wait: wait, Actor: file.Actor, Run: *run, Logger: logger,
	})
	if err != nil {
		return err
	}
	told.Store(gw)
	if *addr == "" {
		err := gw.Server().Run(ctx, &sdk.StdioTransport{})
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	return serveHTTP(ctx, gw, *addr, token, out)
}

// serveHTTP serves gw on addr until ctx ends, and says where.
func serveHTTP(ctx context.Context, gw *gateway.Gateway, addr, token string, out io.Writer) error {
	handler, err := gw.HTTP(token)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gateway listen %s: %w", addr, err)
	}
	hs := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "arbiter gateway listening on http://%s/ (send Authorization: Bearer <token>)\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// A host's event stream (the GET of streamable HTTP) never goes idle:
	// give calls in flight a moment to answer, then cut what is left.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = hs.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = hs.Close()
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway stop: %w", err)
	}
	return nil
}
