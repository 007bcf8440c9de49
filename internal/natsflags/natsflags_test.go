package natsflags_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/natsflags"
	"github.com/nats-io/nats.go"
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
