package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/natsflags"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// connFlags say where the log is.
type connFlags struct {
	natsflags.Flags
	data string
}

func (c *connFlags) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.data, "data", "arbiter-data", "data directory of a worker's embedded JetStream, read when no --nats is given")
	c.Register(fs, "", "NATS server URL(s), comma separated (default: read --data)")
}

// open attaches to the log, never creating or changing a stream, and returns
// it with what closes it.
func (c *connFlags) open(ctx context.Context) (*events.Log, func(), error) {
	if c.URL != "" {
		opts, err := c.Options("arbiter-replay")
		if err != nil {
			return nil, nil, err
		}
		nc, err := nats.Connect(c.URL, append(opts, nats.Timeout(5*time.Second))...)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to %s: %w", c.URL, err)
		}
		return c.attach(ctx, nc, func() { nc.Close() }, c.URL)
	}
	return c.openData(ctx)
}

// openData reads a worker's data directory: through the worker when it is
// running (two servers must never share a store), else by starting the
// store in this process with no listener.
func (c *connFlags) openData(ctx context.Context) (*events.Log, func(), error) {
	dir := filepath.Join(c.data, "jetstream")
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("no JetStream store in %s (is --data the directory a worker was started with? or pass --nats URL)", dir)
		}
		return nil, nil, err
	}
	// A running worker says where it listens (embedded.URLFile): read
	// through it, on whatever port it was given.
	var reached error
	url := ""
	if b, err := os.ReadFile(filepath.Join(c.data, embedded.URLFile)); err == nil {
		url = strings.TrimSpace(string(b))
	}
	if pw, err := os.ReadFile(filepath.Join(c.data, "credentials", "operator.password")); err == nil && url != "" {
		nc, err := nats.Connect(url, nats.Name("arbiter-replay"), nats.Timeout(2*time.Second),
			nats.UserInfo("operator", strings.TrimSpace(string(pw))), embedded.InboxOption("operator"), nats.NoReconnect())
		if err == nil {
			return c.attach(ctx, nc, func() { nc.Close() }, url)
		}
		reached = fmt.Errorf("the worker's server at %s (from %s) did not let us in: %w", url, embedded.URLFile, err)
	}
	srv, err := embedded.Start(embedded.Config{Dir: dir})
	if errors.Is(err, embedded.ErrStoreInUse) {
		// Someone runs this store. Say why we could not read through it,
		// not only that it is locked.
		switch {
		case reached != nil:
			return nil, nil, fmt.Errorf("read %s: %w; and %w. Pass --nats URL (with --user and --password-file) to read through it", dir, reached, err)
		case url == "":
			return nil, nil, fmt.Errorf("read %s: the worker that holds it says no address it listens on (started with --listen ''?), so it can be read only through a server: pass --nats URL, or stop the worker: %w", dir, err)
		default:
			return nil, nil, fmt.Errorf("read %s: the worker listens on %s, but %s has no operator password to read through it with: pass --nats %s --user operator --password-file FILE: %w", dir, url, filepath.Join(c.data, "credentials"), url, err)
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", dir, err)
	}
	nc, err := srv.Connect(nats.Name("arbiter-replay"))
	if err != nil {
		srv.Stop()
		return nil, nil, fmt.Errorf("read %s: %w", dir, err)
	}
	return c.attach(ctx, nc, func() { nc.Close(); srv.Stop() }, dir)
}

func (c *connFlags) attach(ctx context.Context, nc *nats.Conn, closeFn func(), where string) (*events.Log, func(), error) {
	js, err := jetstream.New(nc)
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	log, err := events.Attach(ctx, js, c.LogConfig())
	if err != nil {
		closeFn()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, nil, fmt.Errorf("no runs stream %s_0 in %s (no run was ever recorded there, or --stream/--shards differ from the worker's): %w", c.Stream, where, err)
		}
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	return log, closeFn, nil
}
