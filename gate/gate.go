package gate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
)

// Config builds a [Gate]. Zero values are documented per field.
type Config struct {
	// Log is where runs live. Required. Its connection is best made with
	// nats.ReconnectBufSize(-1), as the arbiter commands make theirs: the
	// client's default buffers a publish while the server is away and
	// sends it after the reconnect, so an allow the program was told had
	// failed could land later as a step decided that never ran, for an
	// operator to settle.
	Log *events.Log
	// Policy decides every call. Required.
	Policy policy.Policy
	// Tools are the calls the program may ask for, as the driver registers
	// them (schema, side-effect class, pin, fixed arguments). Timeout is how
	// long the gate waits for a result after allowing a call: a result
	// not reported by then makes the call interrupted (see
	// [driver.ErrInterrupted]). At least one.
	Tools []driver.Spec
	// Limits, ApprovalTTL, Operators, ClockSkew, MaxObservation, Now and
	// Logger are the driver's (see [driver.Config]).
	Limits         events.Limits
	ApprovalTTL    time.Duration
	Operators      approvals.Operators
	ClockSkew      time.Duration
	MaxObservation int
	Now            func() time.Time
	Logger         *slog.Logger
	// Withheld, when set, says which of Tools are not as they were pinned
	// right now (mcp.Set.Withheld): the driver's [driver.Config.Withheld].
	// Each run records the list when it changes, and a call to a tool in
	// it is refused as an unknown tool, before the policy is asked.
	Withheld func() []events.WithheldTool
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Log == nil:
		return errors.New("gate config: no log")
	case c.Policy == nil:
		return errors.New("gate config: no policy")
	case len(c.Tools) == 0:
		return errors.New("gate config: no tools")
	}
	return nil
}

// Gate opens and resumes gate runs on one log. It is safe for concurrent
// use; each [Run] is asked by one caller at a time.
type Gate struct {
	d   *driver.Driver
	now func() time.Time
}

// New checks cfg and builds a gate. A tool the driver refuses is an error
// naming it (see [driver.New]).
func New(cfg Config) (*Gate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Gate{}
	tools := make([]driver.Tool, len(cfg.Tools))
	for i, s := range cfg.Tools {
		tools[i] = newProxy(s) // driver.New compiles each and names the one it refuses
	}
	d, err := driver.New(driver.Config{
		Log: cfg.Log, Policy: cfg.Policy, Tools: tools, Limits: cfg.Limits, ApprovalTTL: cfg.ApprovalTTL,
		Operators: cfg.Operators, ClockSkew: cfg.ClockSkew, MaxObservation: cfg.MaxObservation,
		Now: cfg.Now, Logger: cfg.Logger, Withheld: cfg.Withheld,
	})
	if err != nil {
		return nil, fmt.Errorf("new gate: %w", err)
	}
	g.d = d
	g.now = cfg.Now
	if g.now == nil {
		g.now = time.Now
	}
	return g, nil
}

// Driver returns the driver the gate's runs are driven by.
func (g *Gate) Driver() *driver.Driver { return g.d }

// AgentPrefix starts the agent name a gate run records ("gate:" and the
// actor): the mark by which a fleet worker can tell a run it must not
// drive, since only the process that holds it can (see docs/adr/0012).
const AgentPrefix = fleet.GateAgentPrefix

// Open starts run id for actor (recorded as the run's agent, after
// [AgentPrefix]) with input: one fenced append, which fails with
// [events.ErrConflict] if the run exists.
func (g *Gate) Open(ctx context.Context, id, actor string, input json.RawMessage) (*Run, error) {
	r, err := g.d.Create(ctx, id, AgentPrefix+actor, input)
	if err != nil {
		return nil, fmt.Errorf("open gate run %s: %w", id, err)
	}
	return g.newRun(r), nil
}

// Resume loads run id as its events say it is: a program that restarted
// carries on its run. A call it allowed and never saw reported is
// recovered on the next [Run.Ask] as the driver recovers an interrupted
// call. A run that [Gate.Open] did not start (its agent lacks
// [AgentPrefix]) is refused with [ErrNotGateRun]: its agent is a fleet's,
// and its calls are not the program's to make.
func (g *Gate) Resume(ctx context.Context, id string) (*Run, error) {
	r, err := g.d.Load(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("resume gate run %s: %w", id, err)
	}
	if agent := r.View().Run.Agent; !strings.HasPrefix(agent, AgentPrefix) {
		return nil, fmt.Errorf("resume gate run %s: %w: its agent is %q, not %s<actor>", id, ErrNotGateRun, agent, AgentPrefix)
	}
	return g.newRun(r), nil
}

func (g *Gate) newRun(r *driver.Run) *Run {
	ctx, cancel := context.WithCancel(context.Background())
	run := &Run{g: g, id: r.ID(), r: r, life: ctx, stop: cancel}
	run.watch()
	return run
}
