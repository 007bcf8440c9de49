package fleet

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
)

// A worker's config may give each of its agents the actor and surface a
// run of it is created with when whoever starts the run names none
// (RunDefaults). The worker never applies them itself: it does not create
// runs, and it never changes what a run recorded. It advertises them with
// the agent in the agents registry, and the run's creator ([Queue.StartAs],
// `arbiter start`) reads them there ([Queue.ApplyDefaults]) and records
// them in run.created, where every policy and every replay sees them. An
// actor or surface the starter names wins.

// RunDefaults is what a run of an agent is created with when its starter
// names no actor (Actor) or no surface (Surface). The zero value gives
// neither.
type RunDefaults struct {
	Actor   *events.Actor `json:"actor,omitempty"`
	Surface string        `json:"surface,omitempty"`
}

// Validate refuses an actor with no id (roles or attributes belong to
// someone), and an empty role or attribute name.
func (d RunDefaults) Validate() error {
	if d.Actor == nil {
		return nil
	}
	if d.Actor.ID == "" {
		return errors.New("actor: an id is required (roles and attributes belong to someone)")
	}
	for i, r := range d.Actor.Roles {
		if r == "" {
			return fmt.Errorf("actor %s: roles[%d] is empty", d.Actor.ID, i)
		}
	}
	for k := range d.Actor.Attributes {
		if k == "" {
			return fmt.Errorf("actor %s: an attribute has an empty name", d.Actor.ID)
		}
	}
	return nil
}

// offerValue is an agents registry entry: the agent's name and its run
// defaults. Entries written before defaults existed hold the bare name.
type offerValue struct {
	Agent string `json:"agent"`
	RunDefaults
}

// ErrDefaultsDisagree: the live workers offering an agent advertise
// different run defaults, so nothing says which one a new run should
// record. Name the actor (or surface) when starting the run, or make the
// workers' configs agree.
var ErrDefaultsDisagree = errors.New("the workers offering this agent give different run defaults")

// DefaultsError is what [Queue.ApplyDefaults] returns when live workers
// disagree: the agent, the field, and every value advertised for it.
type DefaultsError struct {
	Agent, Field string
	Values       []string
}

func (e *DefaultsError) Error() string {
	return fmt.Sprintf("agent %q: the live workers offering it give different default %s: %s; name the %s when starting the run, or make their configs agree",
		e.Agent, e.Field, strings.Join(e.Values, " / "), e.Field)
}

func (e *DefaultsError) Unwrap() error { return ErrDefaultsDisagree }

// Defaults returns the run defaults the live workers advertise for agent:
// those of the workers that offer it by name, or, when none does, those of
// the workers whose default agent drives it. It holds every distinct value
// advertised: one when the workers agree, none when no live worker offers
// the agent.
func (q *Queue) Defaults(ctx context.Context, agent string) ([]RunDefaults, error) {
	for _, name := range []string{agent, anyAgent} {
		vals, found, err := q.offers(ctx, name)
		if err != nil {
			return nil, err
		}
		if found {
			return vals, nil
		}
	}
	return nil, nil
}

// offers reads every live entry of name, returning the distinct run
// defaults they hold and whether there was any entry.
func (q *Queue) offers(ctx context.Context, name string) ([]RunDefaults, bool, error) {
	es, err := q.entries(ctx, hex.EncodeToString([]byte(name))+".*")
	if err != nil {
		return nil, false, err
	}
	var out []RunDefaults
	for _, e := range es {
		var v offerValue
		if e.Value[0] == '{' {
			if err := json.Unmarshal(e.Value, &v); err != nil {
				return nil, false, fmt.Errorf("agents registry %s: entry %s: %w", q.cfg.AgentsBucket, e.Key, err)
			}
		}
		if !containsDefaults(out, v.RunDefaults) {
			out = append(out, v.RunDefaults)
		}
	}
	return out, len(es) > 0, nil
}

func containsDefaults(ds []RunDefaults, d RunDefaults) bool {
	for _, x := range ds {
		if reflect.DeepEqual(normal(x), normal(d)) {
			return true
		}
	}
	return false
}

// normal makes empty roles and attributes nil, so that two configs that
// say the same compare equal.
func normal(d RunDefaults) RunDefaults {
	if d.Actor == nil {
		return d
	}
	a := d.Actor.Clone()
	if len(a.Roles) == 0 {
		a.Roles = nil
	}
	if len(a.Attributes) == 0 {
		a.Attributes = nil
	}
	d.Actor = a
	return d
}

// ApplyDefaults fills body's Actor and Surface, where they are unset, from
// the run defaults the live workers advertise for body.Agent (see
// [Queue.Defaults]). What body already names is kept. When the workers
// disagree on a field body leaves unset, it returns a [*DefaultsError]
// (wrapping [ErrDefaultsDisagree]) and changes nothing.
func (q *Queue) ApplyDefaults(ctx context.Context, body *events.RunCreatedBody) error {
	if body.Actor != nil && body.Surface != "" {
		return nil
	}
	ds, err := q.Defaults(ctx, body.Agent)
	if err != nil {
		return err
	}
	actor, surface := body.Actor, body.Surface
	if actor == nil {
		var vals []string
		for _, d := range ds {
			vals = appendNew(vals, actorText(d.Actor))
		}
		if len(vals) > 1 {
			return &DefaultsError{Agent: body.Agent, Field: "actor", Values: vals}
		}
		if len(ds) > 0 {
			actor = ds[0].Actor.Clone()
		}
	}
	if surface == "" {
		var vals []string
		for _, d := range ds {
			vals = appendNew(vals, fmt.Sprintf("%q", d.Surface))
		}
		if len(vals) > 1 {
			return &DefaultsError{Agent: body.Agent, Field: "surface", Values: vals}
		}
		if len(ds) > 0 {
			surface = ds[0].Surface
		}
	}
	body.Actor, body.Surface = actor, surface
	return nil
}

func appendNew(ss []string, s string) []string {
	for _, x := range ss {
		if x == s {
			return ss
		}
	}
	return append(ss, s)
}

func actorText(a *events.Actor) string {
	if a == nil {
		return "none"
	}
	b, _ := json.Marshal(a) // an actor always encodes
	return string(b)
}

// StartAs creates run with agent, input, and the actor and surface its
// starter names (nil, "": none), each unset one filled from the agent's
// run defaults ([Queue.ApplyDefaults]), and nudges the fleet to drive it.
// It returns what was recorded.
func (q *Queue) StartAs(ctx context.Context, d *driver.Driver, run, agent string, input []byte, actor *events.Actor, surface string) (*events.Actor, string, error) {
	body := events.RunCreatedBody{Agent: agent, Actor: actor, Surface: surface}
	if err := q.ApplyDefaults(ctx, &body); err != nil {
		return nil, "", fmt.Errorf("start run %s: %w", run, err)
	}
	if _, err := d.CreateAs(ctx, run, agent, input, body.Actor, body.Surface); err != nil {
		return nil, "", err
	}
	return body.Actor, body.Surface, q.Nudge(ctx, run, nudgeCreated)
}
