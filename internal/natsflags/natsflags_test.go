package natsflags_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/natsflags"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestFlags_ParseAndLogConfig(t *testing.T) {
	var f natsflags.Flags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Register(fs, "nats://127.0.0.1:4222", "url")
	if err := fs.Parse([]string{"--stream", "S", "--prefix", "p.q", "--shards", "3", "--user", "operator"}); err != nil {
		t.Fatal(err)
	}
	if got, want := f.LogConfig(), (events.Config{Stream: "S", Prefix: "p.q", Shards: 3}); got != want {
		t.Errorf("log config: got %+v, want %+v", got, want)
	}
	if f.URL != "nats://127.0.0.1:4222" || f.User != "operator" {
		t.Errorf("flags: got %+v", f)
	}
}

// A user's connection gets that user's own inbox, which is all its
// permissions let it subscribe to: a request over it succeeds.
func TestFlags_UserConnectsWithItsOwnInbox(t *testing.T) {
	creds := embedded.Credentials{Worker: "w", Operator: "o"}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, Users: creds.Users(embedded.Subjects{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	f := natsflags.Flags{User: "operator", Password: "o"}
	opts, err := f.Options("test")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if inbox := nc.NewRespInbox(); !strings.HasPrefix(inbox, embedded.OperatorInbox+".") {
		t.Errorf("inbox %q, want the operator's prefix %s", inbox, embedded.OperatorInbox)
	}
	if _, err := nc.Request("$JS.API.INFO", nil, 5*time.Second); err != nil {
		t.Errorf("a request as the operator: %v", err)
	}
}

func TestFlags_BadNKeyFileIsNamed(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key.nk")
	if err := os.WriteFile(p, []byte("not a seed"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := natsflags.Flags{NKey: p}
	if _, err := f.Options("x"); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("bad nkey file: got %v, want an error naming %s", err, p)
	}
}

// TestFlags_PasswordFile: the password is read from the file; a missing or
// empty file, or one given with --password or without --user, is an error
// naming it.
func TestFlags_PasswordFile(t *testing.T) {
	creds := embedded.Credentials{Worker: "w", Operator: "o", Admin: "a-secret"}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, Users: creds.Users(embedded.Subjects{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	dir := t.TempDir()
	good := filepath.Join(dir, "admin.password")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(good, []byte("a-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := natsflags.Flags{User: "admin", PasswordFile: good}
	opts, err := f.Options("test")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect as admin with --password-file: %v", err)
	}
	nc.Close()
	for _, bad := range []natsflags.Flags{
		{User: "admin", PasswordFile: filepath.Join(dir, "missing")},
		{User: "admin", PasswordFile: empty},
		{User: "admin", PasswordFile: good, Password: "x"},
		{PasswordFile: good},
	} {
		if _, err := bad.Options("x"); err == nil || !strings.Contains(err.Error(), bad.PasswordFile) {
			t.Errorf("flags %+v: got %v, want an error naming %s", bad, err, bad.PasswordFile)
		}
	}
}

// TestFlags_PasswordFromTheEnvironment: with --user and no password flag,
// the password is $ARBITER_NATS_PASSWORD's, and the connection is let in;
// a flag given wins over it.
func TestFlags_PasswordFromTheEnvironment(t *testing.T) {
	creds := embedded.Credentials{Worker: "w", Operator: "o"}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, Users: creds.Users(embedded.Subjects{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	t.Setenv(natsflags.PasswordEnv, "o")
	f := natsflags.Flags{User: "operator"}
	opts, err := f.Options("test")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("connect with the password from %s: %v", natsflags.PasswordEnv, err)
	}
	nc.Close()
	wrong := natsflags.Flags{User: "operator", Password: "not-it"}
	opts, err = wrong.Options("test")
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(srv.ClientURL(), opts...); err == nil {
		nc.Close()
		t.Error("--password not-it connected: the environment's password was used over the flag")
	}
}

// A connection made with the flags' options, once up, rides out a server
// that is away for longer than the client's default of sixty reconnect
// attempts, and a publish made while the server is away fails at once
// instead of going out after the reconnect: an append its caller was told
// had failed never lands later.
func TestFlags_AConnectionRidesOutAnOutageAndSendsNothingLate(t *testing.T) {
	up := testkit.RestartableJetStream(t)

	var f natsflags.Flags
	opts, err := f.Options("test")
	if err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int64
	// Quick attempts, so that the client's default limit would be used
	// up within the outage below.
	opts = append(opts, nats.ReconnectWait(5*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.ReconnectErrHandler(func(*nats.Conn, error) { failed.Add(1) }))
	nc, err := nats.Connect(up.Server().ClientURL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}

	up.Stop()
	// Away for more failed attempts than the default limit allows: a
	// connection with that limit is closed by then, and the wait ends.
	const beyond = 2 * nats.DefaultMaxReconnect
	deadline := time.Now().Add(20 * time.Second)
	for failed.Load() < beyond && !nc.IsClosed() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20s for %d failed reconnects, saw %d", beyond, failed.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if nc.IsClosed() {
		t.Fatalf("the connection gave up after %d failed reconnects", failed.Load())
	}
	if err := nc.Publish("t.lost", []byte("sent while away")); err == nil {
		t.Fatal("a publish while the server is away: no error, so it waits to go out after the reconnect")
	}

	up.Start()
	for deadline := time.Now().Add(10 * time.Second); !nc.IsConnected(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no reconnect within 10s of the server's return (status %v)", nc.Status())
		}
	}
	// An acknowledged publish after the reconnect: anything sent late
	// would have reached the stream before it.
	if _, err := js.Publish(t.Context(), "t.after", []byte("after")); err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("the stream holds %d messages, want only the one published after the reconnect", info.State.Msgs)
	}
	if _, err := stream.GetLastMsgForSubject(t.Context(), "t.lost"); err == nil {
		t.Fatal("the publish made while the server was away reached the stream after the reconnect")
	}
}
