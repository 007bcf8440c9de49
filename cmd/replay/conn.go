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
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// connFlags say where the log is.
type connFlags struct {
	url, user, password, creds, nkey string
	data                             string
	stream, prefix                   string
	shards                           int
	// workerURL is where a worker on --data listens by default.
	workerURL string
}

func (c *connFlags) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.data, "data", "arbiter-data", "data directory of a worker's embedded JetStream, read when no --nats is given")
	fs.StringVar(&c.url, "nats", "", "NATS server URL(s), comma separated (default: read --data)")
	fs.StringVar(&c.user, "user", "", "NATS user name (with --nats)")
	fs.StringVar(&c.password, "password", "", "NATS password (with --nats)")
	fs.StringVar(&c.creds, "creds", "", "NATS credentials file (with --nats)")
	fs.StringVar(&c.nkey, "nkey", "", "NATS nkey seed file to authenticate with (with --nats)")
	fs.StringVar(&c.stream, "stream", "ARB_RUNS", "base name of the runs streams")
	fs.StringVar(&c.prefix, "prefix", "arb.run", "subject prefix of run events")
	fs.IntVar(&c.shards, "shards", 1, "number of runs streams the log was created with")
	c.workerURL = "nats://127.0.0.1:4222"
}

func (c *connFlags) logConfig() events.Config {
	return events.Config{Stream: c.stream, Prefix: c.prefix, Shards: c.shards}
}

// open attaches to the log, never creating or changing a stream, and returns
// it with what closes it.
func (c *connFlags) open(ctx context.Context) (*events.Log, func(), error) {
	if c.url != "" {
		opts := []nats.Option{nats.Name("arbiter-replay"), nats.Timeout(5 * time.Second)}
		if c.user != "" {
			opts = append(opts, nats.UserInfo(c.user, c.password), embedded.InboxOption(c.user))
		}
		if c.creds != "" {
			opts = append(opts, nats.UserCredentials(c.creds))
		}
		if c.nkey != "" {
			o, err := nats.NkeyOptionFromSeed(c.nkey)
			if err != nil {
				return nil, nil, fmt.Errorf("--nkey %s: %w", c.nkey, err)
			}
			opts = append(opts, o)
		}
		nc, err := nats.Connect(c.url, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to %s: %w", c.url, err)
		}
		return c.attach(ctx, nc, func() { nc.Close() }, c.url)
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
	if pw, err := os.ReadFile(filepath.Join(c.data, "credentials", "operator.password")); err == nil {
		nc, err := nats.Connect(c.workerURL, nats.Name("arbiter-replay"), nats.Timeout(time.Second),
			nats.UserInfo("operator", strings.TrimSpace(string(pw))), embedded.InboxOption("operator"), nats.NoReconnect())
		if err == nil {
			return c.attach(ctx, nc, func() { nc.Close() }, c.workerURL)
		}
	}
	srv, err := embedded.Start(embedded.Config{Dir: dir})
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
	log, err := events.Attach(ctx, js, c.logConfig())
	if err != nil {
		closeFn()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, nil, fmt.Errorf("no runs stream %s_0 in %s (no run was ever recorded there, or --stream/--shards differ from the worker's): %w", c.stream, where, err)
		}
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	return log, closeFn, nil
}
