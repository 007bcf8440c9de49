package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/natsflags"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// conn holds the flags every command that talks to NATS shares.
type conn struct {
	natsflags.Flags
	data string
	// role is the embedded default's user this command needs when no
	// credentials are given: "operator" or "worker".
	role string
	// fs holds the flags: unless --nats was given, a worker's URL file
	// in --data is used when there is one.
	fs *flag.FlagSet

	nc  *nats.Conn
	log *events.Log
	q   *fleet.Queue
	cl  *client.Client
}

func (c *conn) flags(fs *flag.FlagSet) {
	c.fs = fs
	c.Register(fs, "nats://127.0.0.1:4222", "NATS server URL(s), comma separated (default: where the worker on --data listens, else this)")
	fs.StringVar(&c.data, "data", "arbiter-data", "data directory of a worker's embedded JetStream: its credentials/ are used when no --user, --creds or --nkey is given")
}

func (c *conn) open(ctx context.Context) error {
	urlSet := false
	if c.fs != nil {
		c.fs.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "nats" })
	}
	if !urlSet {
		// A worker on --data says where it listens, whatever its port.
		if b, err := os.ReadFile(filepath.Join(c.data, embedded.URLFile)); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			c.URL = strings.TrimSpace(string(b))
		}
	}
	if c.User == "" && c.Creds == "" && c.NKey == "" && c.role != "" {
		if pw, err := os.ReadFile(filepath.Join(c.data, "credentials", c.role+".password")); err == nil {
			c.User, c.Password = c.role, strings.TrimSpace(string(pw))
		}
	}
	opts, err := c.Options("arbiter")
	if err != nil {
		return err
	}
	nc, err := nats.Connect(c.URL, append(opts, nats.Timeout(5*time.Second))...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w (is a worker running? start one with `go run ./cmd/worker`)", c.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	log, err := events.Attach(ctx, js, c.LogConfig())
	if err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("%w (has the server been set up? an administrator runs `arbiter setup --nats %s --shards %d`)", err, c.URL, c.LogConfig().WithDefaults().Shards)
		}
		return err
	}
	c.nc, c.log, c.q = nc, log, fleet.NewQueue(js, fleet.Config{})
	c.cl = client.New(c.log, c.q)
	return nil
}

func (c *conn) close() {
	if c.nc != nil {
		c.nc.Close()
	}
}

// parse parses args into fs, requiring exactly npos positional arguments
// named by names.
func parse(fs *flag.FlagSet, args []string, names ...string) ([]string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	pos := fs.Args()
	// Allow flags after positional arguments: `grant RUN APPROVAL --key F`.
	var rest []string
	for len(pos) > 0 {
		rest = append(rest, pos[0])
		if err := fs.Parse(pos[1:]); err != nil {
			return nil, err
		}
		pos = fs.Args()
	}
	if len(rest) != len(names) {
		return nil, usageError{fmt.Sprintf("want %d argument(s) %v, got %d %v", len(names), names, len(rest), rest)}
	}
	return rest, nil
}
