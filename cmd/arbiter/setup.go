package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/natsflags"
	logsetup "github.com/arbiter-run/arbiter/internal/setup"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// runSetup is the administrator's step: create or update, as the admin
// user, everything the workers and operators use on the server. Workers and
// operators may not (ADR 0008).
func runSetup(ctx context.Context, args []string, out io.Writer) error {
	a, h := helpOf("setup")
	fs := newFlags("setup", a, h)
	var nf natsflags.Flags
	var data string
	var replicas int
	var ackWait time.Duration
	var printConf bool
	nf.Register(fs, "nats://127.0.0.1:4222", "NATS server URL(s), comma separated")
	fs.StringVar(&data, "data", "arbiter-data", "data directory of a worker's embedded JetStream: its credentials/admin.password is used when no --user, --creds or --nkey is given")
	fs.IntVar(&replicas, "replicas", 1, "replicas of every stream and the bucket (3 on a three-server cluster)")
	fs.DurationVar(&ackWait, "ack-wait", 30*time.Second, "how long a worker may hold a run without a sign of life before another takes it")
	fs.BoolVar(&printConf, "print-server-conf", false, "print the authorization block of nats-server.conf for this layout (--shards, --stream, --prefix) and exit")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	subjects := embedded.Subjects{RunPrefix: nf.Prefix, RunStream: nf.Stream, Shards: nf.Shards}
	if printConf {
		if err := nf.LogConfig().Validate(); err != nil {
			return usageError{err.Error()}
		}
		_, err := io.WriteString(out, embedded.ServerConf(subjects))
		return err
	}
	lc := nf.LogConfig()
	lc.Replicas = replicas
	if err := lc.Validate(); err != nil {
		return usageError{err.Error()}
	}
	fc := fleet.Config{AckWait: ackWait, Replicas: replicas}
	if err := fc.Validate(); err != nil {
		return usageError{err.Error()}
	}
	if nf.User == "" && nf.Creds == "" && nf.NKey == "" {
		if pw, err := os.ReadFile(filepath.Join(data, "credentials", "admin.password")); err == nil {
			nf.User, nf.Password = "admin", strings.TrimSpace(string(pw))
		}
	}
	opts, err := nf.Options("arbiter-setup")
	if err != nil {
		return err
	}
	nc, err := nats.Connect(nf.URL, append(opts, nats.Timeout(5*time.Second))...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", nf.URL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	changes, err := logsetup.Run(ctx, js, lc, fc)
	if err != nil {
		return fmt.Errorf("set up %s as %s (it needs the admin user's JetStream API): %w", nf.URL, userName(nf), err)
	}
	n := map[string]int{}
	for _, c := range changes {
		fmt.Fprintln(out, c)
		n[c.Action]++
	}
	fmt.Fprintf(out, "set up %s: %d created, %d updated, %d unchanged (%d shard(s), %d replica(s))\n",
		nf.URL, n["created"], n["updated"], n["unchanged"], lc.WithDefaults().Shards, replicas)
	return nil
}

func userName(nf natsflags.Flags) string {
	switch {
	case nf.User != "":
		return "user " + nf.User
	case nf.Creds != "":
		return "credentials " + nf.Creds
	case nf.NKey != "":
		return "nkey " + nf.NKey
	}
	return "no user"
}
