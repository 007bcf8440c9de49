package setup_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/setup"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func connect(t *testing.T, srv *embedded.Server, user, pw string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, pw), embedded.InboxOption(user))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func actions(cs []setup.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

// TestRun_CreatesThenChangesNothing: the admin's first setup creates every
// resource; a second with the same configuration changes nothing and says
// so; one with another ack wait updates the consumer alone. The worker user
// cannot run it.
func TestRun_CreatesThenChangesNothing(t *testing.T) {
	creds := embedded.Credentials{Worker: "w", Operator: "o", Admin: "a"}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, Users: creds.Users(embedded.Subjects{Shards: 2})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := t.Context()
	worker := connect(t, srv, "worker", "w")
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, err := setup.Run(wctx, worker, events.Config{Shards: 2}, fleet.Config{}); err == nil {
		t.Error("setup as the worker user succeeded, want it refused")
	}
	cancel()

	admin := connect(t, srv, "admin", "a")
	lc := events.Config{Shards: 2}
	got, err := setup.Run(ctx, admin, lc, fleet.Config{})
	if err != nil {
		t.Fatalf("first setup: %v", err)
	}
	want := []string{
		"created stream ARB_RUNS_0", "created stream ARB_RUNS_1",
		"created consumer ARB_RUNS_0/arbiter_notify_0", "created consumer ARB_RUNS_1/arbiter_notify_1", "created stream ARB_DECISIONS",
		"created stream ARB_WORK", "created consumer ARB_WORK/arb-workers", "created stream KV_ARB_VIEWS",
		"created stream KV_ARB_AGENTS", "created stream KV_ARB_RATES",
	}
	if !slices.Equal(actions(got), want) {
		t.Errorf("first setup = %q, want %q", actions(got), want)
	}
	// Something stored survives another setup.
	l, err := events.Attach(ctx, connect(t, srv, "worker", "w"), lc)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.New("run-a", events.RunCreated, events.RunCreatedBody{Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	tail, err := l.Append(ctx, events.Tail{}, ev)
	if err != nil {
		t.Fatal(err)
	}
	again, err := setup.Run(ctx, admin, lc, fleet.Config{})
	if err != nil {
		t.Fatalf("second setup: %v", err)
	}
	for _, c := range again {
		if c.Action != "unchanged" {
			t.Errorf("second setup: %s, want every resource unchanged", c)
		}
	}
	if now, err := l.Tail(ctx, "run-a"); err != nil || now != tail {
		t.Errorf("run after a second setup: %+v, %v; want %+v", now, err, tail)
	}
	third, err := setup.Run(ctx, admin, lc, fleet.Config{AckWait: time.Minute})
	if err != nil {
		t.Fatalf("setup with another ack wait: %v", err)
	}
	for _, c := range third {
		want := "unchanged"
		if c.Name == "ARB_WORK/arb-workers" { // the work queue's ack wait
			want = "updated"
		}
		if c.Action != want {
			t.Errorf("setup with another ack wait: %s, want %s", c, want)
		}
	}
}

// TestRun_RefusesToReshard: a log set up with two shards cannot be set up
// again with three.
func TestRun_RefusesToReshard(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	if _, err := setup.Run(t.Context(), js, events.Config{Shards: 2}, fleet.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Run(t.Context(), js, events.Config{Shards: 3}, fleet.Config{}); err == nil {
		t.Error("setup with 3 shards over a 2-shard log succeeded, want it refused")
	}
	if _, err := setup.Run(t.Context(), js, events.Config{Shards: -1}, fleet.Config{}); err == nil {
		t.Errorf("setup with -1 shards = %v, want a config error", err)
	}
}

// TestRun_RenudgesAWorkQueueInMemory: with the work queue kept in memory,
// every setup nudges the runs the log says have not ended (a server that
// starts again has lost them); moved back to disk, the queue is made anew
// and they are nudged once more; an ended run never is.
func TestRun_RenudgesAWorkQueueInMemory(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	ctx := t.Context()
	lc := events.Config{Shards: 2}
	if _, err := setup.Run(ctx, js, lc, fleet.Config{}); err != nil {
		t.Fatal(err)
	}
	log, err := events.Attach(ctx, js, lc)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		id    string
		ended bool
	}{{"open-1", false}, {"open-2", false}, {"done-1", true}} {
		ev, err := events.New(r.id, events.RunCreated, events.RunCreatedBody{Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		tail, err := log.Append(ctx, events.Tail{}, ev)
		if err != nil {
			t.Fatal(err)
		}
		if r.ended {
			end, _ := events.New(r.id, events.RunCancelled, events.EndBody{Reason: events.ReasonCancelled})
			if _, err := log.Append(ctx, tail, end); err != nil {
				t.Fatal(err)
			}
		}
	}
	nudged := func() []string {
		t.Helper()
		s, err := js.Stream(ctx, "ARB_WORK")
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for subject := range info.State.Subjects {
			out = append(out, subject)
		}
		slices.Sort(out)
		return out
	}
	want := []string{"arb.work.open-1", "arb.work.open-2"}
	if got := nudged(); len(got) != 0 {
		t.Fatalf("a queue on disk set up again: nudges %v, want none (nothing was lost)", got)
	}
	for _, mem := range []bool{true, false} {
		s, err := js.Stream(ctx, "ARB_WORK")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := setup.Run(ctx, js, lc, fleet.Config{WorkInMemory: mem}); err != nil {
			t.Fatalf("setup, in memory %v: %v", mem, err)
		}
		if got := nudged(); !slices.Equal(got, want) {
			t.Errorf("setup, in memory %v: nudges %v, want %v", mem, got, want)
		}
	}
}
