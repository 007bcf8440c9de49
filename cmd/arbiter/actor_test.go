package main

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

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
