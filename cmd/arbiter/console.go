package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/console"
)

// runConsole serves the operator's web console until ctx ends: thin wiring
// over console.New with the operator's key.
func runConsole(ctx context.Context, args []string, out io.Writer) error {
	var keyFile, listen string
	var pageSize int
	c, _, err := setup(ctx, "console", args, func(fs *flag.FlagSet) {
		fs.StringVar(&keyFile, "key", "", "operator key: a file holding an nkeys user seed (SU…) that signs the decisions made in the console")
		fs.StringVar(&listen, "listen", "127.0.0.1:7788", "address to serve on (keep it on loopback: the token is the only other fence)")
		fs.IntVar(&pageSize, "page", 50, "runs per page")
	})
	if err != nil {
		return err
	}
	defer c.close()
	kp, err := operatorKey(keyFile)
	if err != nil {
		return err
	}
	s, err := console.New(console.Config{Log: c.log, Queue: c.q, Key: kp, PageSize: pageSize})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("console: listen on %s: %w", listen, err)
	}
	// Requests share ctx, so the live feeds end when the command does.
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	feed := make(chan error, 1)
	go func() { feed <- s.Run(ctx) }()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if a, ok := ln.Addr().(*net.TCPAddr); ok && !a.IP.IsLoopback() {
		fmt.Fprintf(out, "warning: serving on %s, not loopback: anyone who sees the URL below can decide as this operator\n", ln.Addr())
	}
	fmt.Fprintf(out, "console for operator %s\nopen http://%s%s?token=%s\n", s.Operator(), ln.Addr(), s.Path(), s.Token())
	fmt.Fprintf(out, "(it opens the console once, in one browser; notices link to runs with: arbiter notify --console http://%s%s)\n", ln.Addr(), strings.TrimSuffix(s.Path(), "/"))
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console: %w", err)
	}
	return <-feed
}
