package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
)

// Errors [Client.Start] returns for callers to branch on.
var (
	// ErrRunExists: a run with the id asked for exists and was created
	// with something else than this start asks for.
	ErrRunExists = errors.New("already exists")
	// ErrNoAgent: no live worker offers the agent (see StartOptions.Force).
	ErrNoAgent = errors.New("no live worker offers agent")
)

// StartOptions are what a run is started with. Agent is required.
type StartOptions struct {
	// ID is the run's id; empty: a new ULID. See [Client.Start] for an id
	// that exists.
	ID string
	// Agent names the agent that drives the run (a name in the workers'
	// config).
	Agent string
	// Input is the run's input, a JSON value (for a model agent, usually
	// a string: its task). Optional.
	Input json.RawMessage
	// Actor is who asks for the run; Surface where the request came from
	// ("api", "mcp", "cli"). Policies see both. Optional.
	Actor   *events.Actor
	Surface string
	// Limits of the run: a zero field takes [driver.DefaultLimits],
	// [driver.NoLimit] asks for none. The limits applied are recorded in
	// run.created and returned.
	Limits events.Limits
	// Force records the run even when no live worker offers Agent (it
	// fails no_agent unless one appears).
	Force bool
}

// Started is a run [Client.Start] recorded (or found recorded).
type Started struct {
	// Run is the run's id.
	Run string
	// Limits the run was recorded with (zero field: no limit).
	Limits events.Limits
	// Again is set when the run was already recorded exactly as asked (a
	// start retried after its nudge failed): it was nudged again.
	Again bool
	// Actor and Surface the run was recorded with: the options', or the
	// agent's run defaults where the options named none.
	Actor   *events.Actor
	Surface string
}

// Start records a run (one fenced append of run.created: it is created
// once) and nudges the fleet to drive it.
//
// A run whose id exists is no error when it was created exactly as this
// start asks (same agent, input, actor, surface and limits) and has not
// ended: that is a retried start, and the run is nudged again (Again), so
// a start that recorded the run but failed before its nudge can simply be
// run again. Otherwise the error wraps [ErrRunExists] and names the run.
//
// Errors: a bad id, input that is not one JSON value, or a limit below
// [driver.NoLimit] change nothing and say which; [ErrNoAgent] unless
// Force; a nudge that fails after the run was recorded is returned with
// Started set (retry the start).
func (c *Client) Start(ctx context.Context, o StartOptions) (Started, error) {
	if o.Agent == "" {
		return Started{}, errors.New("start: no agent named")
	}
	if o.ID == "" {
		o.ID = events.NewID()
	}
	if err := events.ValidRunID(o.ID); err != nil {
		return Started{}, fmt.Errorf("start: %w", err)
	}
	if len(o.Input) > 0 {
		if err := jsonform.Validate(o.Input); err != nil {
			return Started{}, fmt.Errorf("start run %s: input: %w", o.ID, err)
		}
	}
	limits, err := driver.ApplyLimits(o.Limits, driver.DefaultLimits)
	if err != nil {
		return Started{}, fmt.Errorf("start run %s: %w", o.ID, err)
	}
	if !o.Force {
		if err := c.offered(ctx, o.Agent); err != nil {
			return Started{}, err
		}
	}
	body := events.RunCreatedBody{Agent: o.Agent, Input: o.Input, Actor: o.Actor.Clone(), Surface: o.Surface, Limits: limits}
	if c.q != nil {
		// What the options leave unset comes from the agent's run
		// defaults in the workers' configs (fleet.RunDefaults), recorded
		// here so policies and replay see it.
		if err := c.q.ApplyDefaults(ctx, &body); err != nil {
			return Started{}, fmt.Errorf("start run %s: %w; nothing recorded (an actor and a surface given together need no defaults)", o.ID, err)
		}
	}
	ev, err := events.New(o.ID, events.RunCreated, body)
	if err != nil {
		return Started{}, fmt.Errorf("start run %s: %w", o.ID, err)
	}
	st := Started{Run: o.ID, Limits: limits, Actor: body.Actor, Surface: body.Surface}
	if _, err := c.log.Append(ctx, events.Tail{}, ev); errors.Is(err, events.ErrConflict) {
		if st.Again, err = c.same(ctx, o.ID, body); err != nil {
			return Started{}, err
		}
	} else if err != nil {
		return Started{}, fmt.Errorf("start run %s: %w", o.ID, err)
	}
	if err := c.nudge(ctx, o.ID, "created"); err != nil {
		return st, fmt.Errorf("start run %s: recorded, but %w; start it again (the same start is idempotent)", o.ID, err)
	}
	return st, nil
}

// offered checks that a live worker offers agent.
func (c *Client) offered(ctx context.Context, agent string) error {
	if c.q == nil {
		return fmt.Errorf("start: %w %q: this client has no work queue to ask", ErrNoAgent, agent)
	}
	ok, err := c.q.Offered(ctx, agent)
	if err != nil {
		return fmt.Errorf("start: cannot tell which agents the workers offer: %w", err)
	}
	if !ok {
		names, _ := c.q.Agents(ctx)
		return fmt.Errorf("start: %w %q (offered: %s); nothing recorded", ErrNoAgent, agent, strings.Join(names, ", "))
	}
	return nil
}

// same reports whether run exists as created with want and not ended;
// otherwise the error wraps ErrRunExists.
func (c *Client) same(ctx context.Context, run string, want events.RunCreatedBody) (bool, error) {
	v, recs, err := c.Read(ctx, run)
	if err != nil && len(recs) == 0 {
		return false, fmt.Errorf("start: run %s %w and cannot be read: %w", run, ErrRunExists, err)
	}
	got, derr := events.DecodeBody[events.RunCreatedBody](recs[0].Event)
	if derr != nil || recs[0].Event.Kind != events.RunCreated {
		return false, fmt.Errorf("start: run %s %w (its first event is not a run.created); choose another id", run, ErrRunExists)
	}
	switch {
	case !sameCreation(got, want):
		return false, fmt.Errorf("start: run %s %w (created with agent %q and other input, actor, surface or limits than asked now); choose another id", run, ErrRunExists, got.Agent)
	case err != nil:
		return false, fmt.Errorf("start: run %s %w: %w", run, ErrRunExists, err)
	case v.Run.Status.Ended():
		return false, fmt.Errorf("start: run %s %w and has ended %s; choose another id", run, ErrRunExists, v.Run.Status)
	}
	return true, nil
}

func sameCreation(got, want events.RunCreatedBody) bool {
	in := func(b json.RawMessage) []byte {
		if len(b) == 0 {
			return nil
		}
		p, err := jsonform.PolicyJSON(b)
		if err != nil {
			return b
		}
		return p
	}
	return got.Agent == want.Agent && got.Surface == want.Surface && got.Limits == want.Limits &&
		bytes.Equal(in(got.Input), in(want.Input)) && reflect.DeepEqual(got.Actor, want.Actor)
}

// nudge asks the fleet to look at run.
func (c *Client) nudge(ctx context.Context, run, why string) error {
	if c.q == nil {
		return errors.New("the fleet was not nudged (this client has no work queue)")
	}
	if err := c.q.Nudge(ctx, run, why); err != nil {
		return fmt.Errorf("the fleet was not nudged: %w", err)
	}
	return nil
}

// WaitAgent waits until a live worker offers agent (a worker says so a
// moment after it starts), for a program that starts its workers and its
// runs together. It reads every poll (Config.Poll); when ctx ends first
// the error wraps [ErrNoAgent] and ctx's.
func (c *Client) WaitAgent(ctx context.Context, agent string) error {
	if c.q == nil {
		return fmt.Errorf("wait for agent %q: %w: this client has no work queue to ask", agent, ErrNoAgent)
	}
	for {
		ok, err := c.q.Offered(ctx, agent)
		if ok && err == nil {
			return nil
		}
		if perr := pause(ctx, c.poll); perr != nil {
			return fmt.Errorf("wait for agent %q: %w: %w", agent, ErrNoAgent, perr)
		}
	}
}
