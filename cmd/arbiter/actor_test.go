package main

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/testkit"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

func TestStart_RecordsTheActorAndSurface(t *testing.T) {
	e := newOpsEnv(t)
	var out bytes.Buffer
	err := runStart(t.Context(), e.args("--agent", "demo", "--force", "--id", "asked", "--actor", "ana", "--role", "finance", "--role", "ops",
		"--attr", "team=emea", "--surface", "cli"), &out)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	recs, _, err := e.log.Read(t.Context(), "asked")
	if err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	for _, r := range recs {
		evs = append(evs, r.Event)
	}
	v, err := projector.Fold(evs...)
	if err != nil {
		t.Fatal(err)
	}
	want := &events.Actor{ID: "ana", Roles: []string{"finance", "ops"}, Attributes: map[string]string{"team": "emea"}}
	if !reflect.DeepEqual(v.Run.Actor, want) || v.Run.Surface != "cli" {
		t.Errorf("recorded actor %+v surface %q, want %+v cli", v.Run.Actor, v.Run.Surface, want)
	}
}

func TestStart_ActorFlagRefusals(t *testing.T) {
	e := newOpsEnv(t)
	for _, args := range [][]string{
		{"--agent", "demo", "--role", "finance"},
		{"--agent", "demo", "--actor", "ana", "--attr", "team"},
	} {
		err := runStart(t.Context(), e.args(args...), &bytes.Buffer{})
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("start %v = %v, want a usage error", args, err)
		}
	}
}

// TestStart_TakesTheAgentsRunDefaults: with a live worker whose config
// gives agent demo a default actor and surface, `arbiter start` naming
// neither records them in run.created and says so; naming an actor keeps
// it, and the surface still defaults.
func TestStart_TakesTheAgentsRunDefaults(t *testing.T) {
	e := newOpsEnv(t)
	q := fleet.NewQueue(e.js, fleet.Config{})
	fin := &events.Actor{ID: "fin-desk", Roles: []string{"finance"}}
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: e.d, Queue: q,
		Agents:   map[string]driver.Agent{"demo": testkit.NewScript(testkit.Call("done", `{}`))},
		Defaults: map[string]fleet.RunDefaults{"demo": {Actor: fin, Surface: "api"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ds, _ := q.Defaults(t.Context(), "demo"); len(ds) == 1 && ds[0].Actor != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker never advertised its run defaults")
		}
	}
	for _, c := range []struct {
		id    string
		args  []string
		actor *events.Actor
		out   string
	}{
		{"by-default", nil, fin, "started run by-default (agent demo, actor fin-desk (finance), surface api; limits: 100 steps, 5 failures in a row, 5 repeats, no time limit)\n"},
		{"by-name", []string{"--actor", "ana"}, &events.Actor{ID: "ana"}, "started run by-name (agent demo, actor ana, surface api; limits: 100 steps, 5 failures in a row, 5 repeats, no time limit)\n"},
	} {
		var out bytes.Buffer
		if err := runStart(t.Context(), e.args(append([]string{"--agent", "demo", "--id", c.id}, c.args...)...), &out); err != nil {
			t.Fatalf("start %s: %v", c.id, err)
		}
		if out.String() != c.out {
			t.Errorf("start %s printed %q, want %q", c.id, out.String(), c.out)
		}
		recs, _, err := e.log.Read(t.Context(), c.id)
		if err != nil {
			t.Fatal(err)
		}
		v, err := projector.Fold(recs[0].Event)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(v.Run.Actor, c.actor) || v.Run.Surface != "api" {
			t.Errorf("%s recorded actor %+v surface %q, want %+v api", c.id, v.Run.Actor, v.Run.Surface, c.actor)
		}
	}
}
