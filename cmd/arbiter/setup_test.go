package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// TestSetup_TwiceChangesNothingTheSecondTime: on a fresh server `arbiter
// setup` creates the seven resources of a two-shard layout and says so; run
// again it changes nothing and says that.
func TestSetup_TwiceChangesNothingTheSecondTime(t *testing.T) {
	data := t.TempDir()
	creds, err := embedded.LoadCredentials(data)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, Users: creds.Users(embedded.Subjects{Shards: 2})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	args := []string{"--nats", srv.ClientURL(), "--user", "admin", "--password-file", filepath.Join(data, "credentials", "admin.password"), "--shards", "2"}
	var first, second bytes.Buffer
	if err := runSetup(t.Context(), args, &first); err != nil {
		t.Fatalf("first setup: %v\n%s", err, first.String())
	}
	want := "created stream ARB_RUNS_0\ncreated stream ARB_RUNS_1\ncreated consumer ARB_RUNS_0/arbiter_notify_0\ncreated consumer ARB_RUNS_1/arbiter_notify_1\n" +
		"created stream ARB_DECISIONS\ncreated stream ARB_WORK\n" +
		"created consumer ARB_WORK/arb-workers\ncreated stream KV_ARB_VIEWS\ncreated stream KV_ARB_AGENTS\ncreated stream KV_ARB_RATES\n" +
		"set up " + srv.ClientURL() + ": 10 created, 0 updated, 0 unchanged (2 shard(s), 1 replica(s))\n"
	if first.String() != want {
		t.Errorf("first setup printed:\n%s\nwant:\n%s", first.String(), want)
	}
	if err := runSetup(t.Context(), args, &second); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	if !strings.Contains(second.String(), ": 0 created, 0 updated, 10 unchanged") || strings.Contains(second.String(), "created stream") {
		t.Errorf("second setup printed:\n%s\nwant every resource unchanged", second.String())
	}
}

// TestSetup_NeedsTheAdmin: the worker and operator users cannot set up.
func TestSetup_NeedsTheAdmin(t *testing.T) {
	e := newOpsEnv(t)
	for _, user := range []string{"worker", "operator"} {
		var out bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		err := runSetup(ctx, []string{"--nats", e.url, "--user", user, "--password-file", filepath.Join(e.data, "credentials", user+".password"), "--shards", "2"}, &out)
		if err == nil || !strings.Contains(err.Error(), "admin") {
			t.Errorf("setup as %s = %v (printed %q), want an error naming the admin user", user, err, out.String())
		}
		cancel()
	}
}

// TestSetup_PrintServerConf: the printed block loads as the embedded
// default's users for that many shards.
func TestSetup_PrintServerConf(t *testing.T) {
	var out bytes.Buffer
	if err := runSetup(t.Context(), []string{"--print-server-conf", "--shards", "4"}, &out); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := embedded.Credentials{Worker: "w", Operator: "o", Admin: "a"}
	t.Setenv("ARBITER_WORKER_PASSWORD", creds.Worker)
	t.Setenv("ARBITER_OPERATOR_PASSWORD", creds.Operator)
	t.Setenv("ARBITER_ADMIN_PASSWORD", creds.Admin)
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("printed configuration does not load: %v\n%s", err, out.String())
	}
	want := creds.Users(embedded.Subjects{Shards: 4})
	if len(opts.Users) != len(want) {
		t.Fatalf("%d users, want %d", len(opts.Users), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(opts.Users[i], want[i]) {
			t.Errorf("user %d = %+v, want %+v", i, opts.Users[i], want[i])
		}
	}
	var ue usageError
	if err := runSetup(t.Context(), []string{"--print-server-conf", "--shards", "-3"}, &out); !errors.As(err, &ue) {
		t.Errorf("print-server-conf with -3 shards = %v, want a usage error", err)
	}
}

// TestOps_TwoShards: with --shards 2 the operator command attaches to a
// two-shard log and reads runs on both shards; with the wrong count it says
// why it cannot.
func TestOps_TwoShards(t *testing.T) {
	e := newShardedOpsEnv(t, 2)
	runs := map[int]string{}
	for i := 0; len(runs) < 2; i++ {
		run := fmt.Sprintf("run-%d", i)
		if _, ok := runs[e.log.Shard(run)]; !ok {
			runs[e.log.Shard(run)] = run
			e.pause(t, run, `{"to":"ops"}`)
		}
	}
	var out bytes.Buffer
	if err := runApprovals(t.Context(), e.args(), &out); err != nil {
		t.Fatalf("approvals --shards 2: %v\n%s", err, out.String())
	}
	for _, run := range runs {
		if !strings.Contains(out.String(), "run "+run+":") {
			t.Errorf("approvals --shards 2 does not list %s:\n%s", run, out.String())
		}
		var show bytes.Buffer
		if err := runShow(t.Context(), e.args(run), &show); err != nil || !strings.Contains(show.String(), string(projector.Waiting)) {
			t.Errorf("show %s --shards 2 = %v:\n%s", run, err, show.String())
		}
	}
	err := runApprovals(t.Context(), []string{"--nats", e.url, "--data", e.data, "--shards", "1"}, &out)
	if err == nil || !strings.Contains(err.Error(), "2 shards") {
		t.Errorf("approvals --shards 1 on a two-shard log = %v, want an error saying it has 2 shards", err)
	}
}

// TestOps_ServerNotSetUpSaysSo: on a server no one has set up, a command
// says to run arbiter setup.
func TestOps_ServerNotSetUpSaysSo(t *testing.T) {
	data := t.TempDir()
	creds, err := embedded.LoadCredentials(data)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, Users: creds.Users(embedded.Subjects{})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	err = runApprovals(t.Context(), []string{"--nats", srv.ClientURL(), "--data", data}, &bytes.Buffer{})
	if !errors.Is(err, jetstream.ErrStreamNotFound) || !strings.Contains(err.Error(), "arbiter setup") {
		t.Errorf("approvals on a server not set up = %v, want %v saying to run arbiter setup", err, jetstream.ErrStreamNotFound)
	}
}
