package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/setup"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startWorker runs the worker command's run with f until the test ends.
func startWorker(t *testing.T, f flags) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("worker did not stop within 10s")
		}
	})
	return done
}

// dial connects to url as user, retrying while the worker starts (5s).
func dial(t *testing.T, url, user, pw string) jetstream.JetStream {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		nc, err := nats.Connect(url, nats.UserInfo(user, pw), embedded.InboxOption(user))
		if err == nil {
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			return js
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect to %s as %s: %v", url, user, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// password waits for the worker to write user's password into data.
func password(t *testing.T, data, user string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(data, "credentials", user+".password"))
		if err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s password in %s after 5s: %v", user, data, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// setUpQueue waits for the worker to have set its server up (the bucket is
// made last), and attaches the queue.
func setUpQueue(t *testing.T, js jetstream.JetStream) *fleet.Queue {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		q, _, err := fleet.Attach(t.Context(), js, fleet.Config{})
		if err == nil {
			return q
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker's server is not set up after 5s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startRuns creates one demo run on every shard of l (as the worker user,
// as `arbiter start` does) and nudges them.
func startRuns(t *testing.T, l *events.Log, q *fleet.Queue) []string {
	t.Helper()
	var runs []string
	seen := map[int]bool{}
	for i := 0; len(seen) < l.Config().Shards; i++ {
		run := fmt.Sprintf("run-%d", i)
		if seen[l.Shard(run)] {
			continue
		}
		seen[l.Shard(run)] = true
		ev, err := events.New(run, events.RunCreated, events.RunCreatedBody{Agent: "demo"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(t.Context(), events.Tail{}, ev); err != nil {
			t.Fatalf("start %s: %v", run, err)
		}
		if err := q.Nudge(t.Context(), run, "created"); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	return runs
}

// waitWaiting reads run through l until the demo agent has it waiting on
// its approval (10s).
func waitWaiting(t *testing.T, l *events.Log, run string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, _, err := l.Read(t.Context(), run)
		if err == nil {
			evs := make([]events.Event, len(recs))
			for i, r := range recs {
				evs[i] = r.Event
			}
			if v, err := projector.Fold(evs...); err == nil && v.Run.Status == projector.Waiting {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s not waiting for approval after 10s (%v)", run, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWorker_HonoursConfiguredShards: a worker hosting the embedded server
// with shards: 2 in its config lays the log out in two streams, gives the
// users permissions for two, drives runs on both; the operator attaches
// with two shards (and is refused with one) and reads them.
func TestWorker_HonoursConfiguredShards(t *testing.T) {
	data := t.TempDir()
	addr := freeAddr(t)
	cfg := writeConfig(t, "log:\n  shards: 2\n")
	startWorker(t, flags{config: cfg, data: data, listen: addr, concurrency: 4, ackWait: 5 * time.Second})
	url := "nats://" + addr
	worker := dial(t, url, "worker", password(t, data, "worker"))
	operator := dial(t, url, "operator", password(t, data, "operator"))
	ctx := t.Context()
	q := setUpQueue(t, worker)
	for _, name := range []string{"ARB_RUNS_0", "ARB_RUNS_1"} {
		if _, err := worker.Stream(ctx, name); err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
	}
	if _, err := events.Attach(ctx, operator, events.Config{}); err == nil {
		t.Error("operator attached with one shard to a two-shard log")
	}
	ol, err := events.Attach(ctx, operator, events.Config{Shards: 2})
	if err != nil {
		t.Fatalf("operator attach with two shards: %v", err)
	}
	wl, err := events.Attach(ctx, worker, events.Config{Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range startRuns(t, wl, q) {
		waitWaiting(t, ol, run)
	}
}

// TestWorker_JoinsOnlyASetUpServer: a worker given --nats creates nothing:
// on a server no one has set up it stops with a message saying to run
// `arbiter setup`; once the admin has, it attaches and drives runs.
func TestWorker_JoinsOnlyASetUpServer(t *testing.T) {
	creds := embedded.Credentials{Worker: "w", Operator: "o", Admin: "a"}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, Users: creds.Users(embedded.Subjects{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	pwFile := filepath.Join(t.TempDir(), "worker.password")
	if err := os.WriteFile(pwFile, []byte("w\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := flags{natsURL: srv.ClientURL(), user: "worker", passwordFile: pwFile, data: t.TempDir(), concurrency: 4, ackWait: 5 * time.Second}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = run(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !errors.Is(err, errNotSetUp) || !errors.Is(err, jetstream.ErrStreamNotFound) || !strings.Contains(err.Error(), "arbiter setup") {
		t.Fatalf("worker on a server not set up = %v, want %v (%v) telling to run arbiter setup", err, errNotSetUp, jetstream.ErrStreamNotFound)
	}
	admin := dial(t, srv.ClientURL(), "admin", "a")
	if _, err := setup.Run(t.Context(), admin, events.Config{}, fleet.Config{}); err != nil {
		t.Fatal(err)
	}
	startWorker(t, f)
	worker := dial(t, srv.ClientURL(), "worker", "w")
	wl, err := events.Attach(t.Context(), worker, events.Config{})
	if err != nil {
		t.Fatal(err)
	}
	q, _, err := fleet.Attach(t.Context(), worker, fleet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range startRuns(t, wl, q) {
		waitWaiting(t, wl, run)
	}
}

// TestWorker_NoAuthSetsUpAnonymously: with --no-auth the embedded server has
// no users; the worker sets it up and works on one anonymous connection.
func TestWorker_NoAuthSetsUpAnonymously(t *testing.T) {
	addr := freeAddr(t)
	data := t.TempDir()
	startWorker(t, flags{data: data, listen: addr, noAuth: true, concurrency: 2, ackWait: 5 * time.Second})
	deadline := time.Now().Add(5 * time.Second)
	var nc *nats.Conn
	for {
		var err error
		if nc, err = nats.Connect("nats://" + addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect anonymously: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	q := setUpQueue(t, js)
	l, err := events.Attach(t.Context(), js, events.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range startRuns(t, l, q) {
		waitWaiting(t, l, run)
	}
	if _, err := os.Stat(filepath.Join(data, "credentials")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--no-auth wrote credentials (%v), want none", err)
	}
}

// TestSyncAlwaysFor: the durability levels map to SyncAlways, an unknown
// one is refused naming the levels, and a level with --nats is refused
// naming the server's own setting.
func TestSyncAlwaysFor(t *testing.T) {
	for _, tc := range []struct {
		level  string
		joined bool
		want   bool
		err    string
	}{
		{"", false, false, ""},
		{"process", false, false, ""},
		{"machine", false, true, ""},
		{"power", false, false, `durability "power": want process`},
		{"machine", true, false, "sync_interval: always"},
		{"", true, false, ""},
	} {
		got, err := syncAlwaysFor(tc.level, tc.joined)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q joined=%v: %v", tc.level, tc.joined, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q joined=%v: got error %v, want one saying %q", tc.level, tc.joined, err, tc.err)
		case got != tc.want:
			t.Errorf("%q joined=%v: got SyncAlways %v, want %v", tc.level, tc.joined, got, tc.want)
		}
	}
}

// TestWorker_RunDefaultsFromTheConfig: the worker command, with a rules
// file whose condition depends on the actor (financial data only for the
// finance role) and run_defaults giving two agents an actor each,
// advertises them; a run created the way `arbiter start` creates one
// (ApplyDefaults, then run.created as the worker user) records the agent's
// default actor, and the same call is allowed for one agent's runs and
// denied for the other's.
func TestWorker_RunDefaultsFromTheConfig(t *testing.T) {
	data := t.TempDir()
	addr := freeAddr(t)
	rulesFile, err := filepath.Abs("../../examples/policies/pii-protection.yaml")
	if err != nil {
		t.Fatal(err)
	}
	script := `[{tool: read_file, args: '{"path":"ledger.txt"}'}, {tool: finish, args: '{"summary":"read"}'}]`
	cfg := writeConfig(t, `
tools:
  - {name: read_file, data: [financial.ledger]}
  - {name: finish}
policy: {rules: `+rulesFile+`}
agents:
  fin-bot: `+script+`
  help-bot: `+script+`
run_defaults:
  fin-bot: {actor: {id: fin-desk, roles: [finance]}, surface: api}
  help-bot: {actor: {id: help-desk, roles: [support], attributes: {tier: "1"}}}
`)
	startWorker(t, flags{config: cfg, data: data, listen: addr, concurrency: 4, ackWait: 5 * time.Second})
	js := dial(t, "nats://"+addr, "worker", password(t, data, "worker"))
	q := setUpQueue(t, js)
	l, err := events.Attach(t.Context(), js, events.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		agent, role, surface string
		outcome              events.Outcome
	}{{"fin-bot", "finance", "api", "allow"}, {"help-bot", "support", "", "deny"}} {
		var body events.RunCreatedBody
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			body = events.RunCreatedBody{Agent: c.agent}
			if err := q.ApplyDefaults(t.Context(), &body); err != nil {
				t.Fatal(err)
			}
			if body.Actor != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no default actor advertised after 10s", c.agent)
			}
		}
		run := "run-" + c.agent
		ev, err := events.New(run, events.RunCreated, body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(t.Context(), events.Tail{}, ev); err != nil {
			t.Fatal(err)
		}
		if err := q.Nudge(t.Context(), run, "created"); err != nil {
			t.Fatal(err)
		}
		v := waitEnded(t, l, run)
		if v.Run.Actor == nil || v.Run.Actor.Roles[0] != c.role || v.Run.Surface != c.surface {
			t.Errorf("%s: recorded actor %+v surface %q, want role %s surface %q", run, v.Run.Actor, v.Run.Surface, c.role, c.surface)
		}
		if s := v.Step(1); s == nil || s.Policy == nil || s.Policy.Outcome != c.outcome {
			t.Errorf("%s: step 1 %+v, want the policy to %s", run, s, c.outcome)
		}
	}
}

// waitEnded reads run through l until it ended (10s).
func waitEnded(t *testing.T, l *events.Log, run string) projector.View {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, _, err := l.Read(t.Context(), run)
		if err == nil {
			evs := make([]events.Event, len(recs))
			for i, r := range recs {
				evs[i] = r.Event
			}
			if v, err := projector.Fold(evs...); err == nil && v.Run.Status.Ended() {
				return v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s not ended after 10s (%v)", run, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
