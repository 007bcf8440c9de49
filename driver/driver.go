// Package driver owns the loop that drives a run one step at a time: record
// the agent's decision exactly, check its arguments, ask the policy, act on
// the answer, and record what came of it, every transition one fenced event.
// It resumes runs paused on an approval and recovers calls a crash
// interrupted.
//
// It is the one package that pulls events, projector, policy and approvals
// together. Safety rests on the fence: a driver that loses an append stops
// driving that run at once and never executes a tool after it.
package driver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// Config builds a [Driver]. Zero values are documented per field.
type Config struct {
	// Log is where runs live. Required.
	Log *events.Log
	// Policy decides every request. Required.
	Policy policy.Policy
	// Shadow, when set, is a candidate policy asked beside Policy on every
	// evaluation: its answer is recorded with the result and never acted
	// on (shadow mode). Its error is recorded, not raised.
	Shadow policy.Policy
	// Tools the agent may request. Names must be unique.
	Tools []Tool
	// Limits for runs this driver creates, unless a run is asked for with
	// limits of its own (see [CreateOptions]). A zero field takes the
	// default in [DefaultLimits]; [NoLimit] asks for none. [New] refuses
	// any other negative value.
	Limits events.Limits
	// ApprovalTTL is how long an approval waits for a decision when the
	// policy sets no expiry. Zero: approvals do not expire.
	ApprovalTTL time.Duration
	// Operators whose signed decisions are accepted. Empty: no grant or
	// denial is ever accepted.
	Operators approvals.Operators
	// Withheld, when set, says which tools the runtime knows of and
	// refuses to offer right now, and why (MCP tools that are not as they
	// were pinned: mcp.Set.Withheld). It is asked before every step; a
	// change is recorded on the run (run.tools) before the step, a tool it
	// names is not shown to the agent, and a request for it is refused as
	// an unknown tool, whatever the policy says.
	Withheld func() []events.WithheldTool
	// ClockSkew is how far a decision's signing time may lie before its
	// request or after its receipt (see [approvals.Admit]). Default
	// [approvals.DefaultSkew].
	ClockSkew time.Duration
	// MaxObservation bounds the bytes of a tool result recorded (the rest is
	// cut and the observation marked truncated). Default 64 KiB.
	MaxObservation int
	// MaxDecision bounds the bytes of an agent's decision (tool name,
	// arguments, call id and reason) recorded whole. A larger one is
	// recorded by its size, hash and a prefix, and refused as an invalid
	// decision the agent sees. Default: half the largest event the server
	// takes (512 KiB with its default 1 MiB payload), so the approval that
	// carries the arguments once more still fits; a decision whose event
	// the server would refuse is treated the same whatever this says.
	MaxDecision int
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives what the driver does. Default: discard.
	Logger *slog.Logger
	// OnAppend, when set, is called after every append attempt with the
	// event's kind, body, how long the append took and its error (metrics).
	OnAppend func(kind events.Kind, body any, took time.Duration, err error)
	// BeforeAppend, when set, is called just before every append with the
	// event's kind and body (fault injection: the crash tests' worker,
	// built with the arbiter_faults tag, stops itself here).
	BeforeAppend func(kind events.Kind, body any)
}

// Driver drives runs. It is safe for concurrent use by many goroutines, each
// driving a different run.
type Driver struct {
	cfg      Config
	log      *events.Log
	policy   policy.Policy
	policyID string
	tools    map[string]*CompiledTool
	specs    []events.ToolSpec
}

// New checks cfg and builds a driver. It refuses a tool with no schema, a
// schema that does not compile, an unknown side-effect class, no timeout, a
// duplicate name, and a policy id that cannot be recorded; each error names
// the tool or the id and what is wrong.
func New(cfg Config) (*Driver, error) {
	if cfg.Log == nil {
		return nil, errors.New("new driver: no log")
	}
	if cfg.Policy == nil {
		return nil, errors.New("new driver: no policy")
	}
	id := policy.ID(cfg.Policy)
	if err := policy.ValidateID(id); err != nil {
		return nil, fmt.Errorf("new driver: %w", err)
	}
	d := &Driver{cfg: cfg, log: cfg.Log, policy: cfg.Policy, policyID: id, tools: map[string]*CompiledTool{}}
	for _, t := range cfg.Tools {
		ct, err := Compile(t)
		if err != nil {
			return nil, fmt.Errorf("new driver: %w", err)
		}
		if _, dup := d.tools[ct.Spec.Name]; dup {
			return nil, fmt.Errorf("new driver: %w %q: registered twice", ErrBadTool, ct.Spec.Name)
		}
		d.tools[ct.Spec.Name] = ct
		d.specs = append(d.specs, ct.Record)
	}
	if d.cfg.MaxObservation == 0 {
		d.cfg.MaxObservation = 64 << 10
	}
	if d.cfg.Now == nil {
		d.cfg.Now = time.Now
	}
	if d.cfg.ClockSkew == 0 {
		d.cfg.ClockSkew = approvals.DefaultSkew
	}
	if d.cfg.Logger == nil {
		d.cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := ApplyLimits(d.cfg.Limits, DefaultLimits)
	if err != nil {
		return nil, fmt.Errorf("new driver: %w", err)
	}
	d.cfg.Limits = l
	return d, nil
}

// Tools returns copies of the specs of the driver's tools as runs record
// them: changing them changes nothing the driver holds.
func (d *Driver) Tools() []events.ToolSpec {
	out := make([]events.ToolSpec, len(d.specs))
	for i, s := range d.specs {
		s.Schema = append(json.RawMessage(nil), s.Schema...)
		out[i] = s
	}
	return out
}

// Log returns the driver's log.
func (d *Driver) Log() *events.Log { return d.log }

// Run is a run loaded into a driver: its view and the tail every append is
// fenced on. One goroutine drives a Run at a time.
type Run struct {
	view projector.View
	tail events.Tail
	// cached is set while part of view was not folded by this process
	// from the log (it came from a snapshot): it may hold anything, so it
	// may decide nothing but what the agent sees next. Before acting on a
	// past fact (a recorded decision, a grant, an interrupted call) the
	// driver folds the run from its events again (see [Driver.verify]).
	cached bool
	// next is the agent's input for the view at tail nextAt, made while
	// the event that led to it was stored; used once, if the tail is still
	// that one when the agent is asked.
	next    StepInput
	hasNext bool
	nextAt  events.Tail
	// undelivered is the agent's decision whose append failed (the server
	// away, say), made at tail undeliveredAt: the next drive at that tail
	// records it instead of asking the agent again.
	undelivered    Action
	hasUndelivered bool
	undeliveredAt  events.Tail
	// kept is the observation of the last step's call that could not be
	// stored (the server away, say), or that a holder knows (see
	// [Run.Keep]), made at tail keptAt: a drive at that tail records it
	// instead of recovering the call as interrupted.
	kept    events.ObservedBody
	hasKept bool
	keptAt  events.Tail
	// lost is the tail (count and hash) r's run would have if the last
	// append that failed other than on a conflict was stored, and
	// lostCall the step whose call that event decided or allowed (0: it
	// was of no call); mineCall is that of the last event r stored, the
	// one at r's tail (anything else that moves the tail makes a new Run).
	// lateCall, on a Run read again by [Driver.Reload], is the step when
	// the run ends with either of those events, at tail lateAt (see
	// [Run.OwnCallLast]).
	lost     events.Tail
	lostCall int
	mineCall int
	lateCall int
	lateAt   events.Tail
	// agent is the agent of the drive in progress; spec its decision for
	// the view at tail specAt, asked and judged while the observation that
	// led to that view was stored (a [Pure] agent only).
	agent   Agent
	spec    foreseen
	hasSpec bool
	specAt  events.Tail
	// ahead is spec as the step in progress took it (see advance): the
	// step's own commit writes spec again.
	ahead foreseen
	// stop is the drive's stop (see [Driver.DriveUntil]): once it is
	// closed, nothing is prepared for a next step the drive will not take.
	stop <-chan struct{}
	// checkedGrant is the decision event of the budget grant r waits on
	// once this driver checked it (see settle): the agent is asked next,
	// and its attempt uses the grant.
	checkedGrant string
	// spare is the pending append of the last commit, whose memory (the
	// events.Pending within it too) the next append reuses: a run has one
	// append in flight at a time, and nothing keeps a pending once it is
	// committed.
	spare *pending
	// driving is set while a drive is on (see [Driver.DriveUntil]), and
	// runner is the drive's runner of tool calls once it made one.
	driving bool
	runner  *runner
}

// ID is the run's id.
func (r *Run) ID() string { return r.view.Run.ID }

// View returns a copy of the run's view.
func (r *Run) View() projector.View { return r.view.Clone() }

// Peek calls fn with the run's view itself, not a copy ([Run.View] copies
// it): for a reader that looks at a few fields between two drives. fn must
// not change the view, keep any part of it after it returns (copy what it
// keeps) or drive r.
func (r *Run) Peek(fn func(v *projector.View)) { fn(&r.view) }

// Tail returns where the run stands in the log.
func (r *Run) Tail() events.Tail { return r.tail }

// Create starts run id with the driver's tools and limits: one fenced append
// of run.created, which fails with [events.ErrConflict] if the run exists.
func (d *Driver) Create(ctx context.Context, id, agent string, input json.RawMessage) (*Run, error) {
	return d.CreateAs(ctx, id, agent, input, nil, "")
}

// CreateAs is [Driver.Create] recording who asked for the run (nil: nobody
// named) and the surface the request came through, for policies to see.
func (d *Driver) CreateAs(ctx context.Context, id, agent string, input json.RawMessage, actor *events.Actor, surface string) (*Run, error) {
	return d.CreateWith(ctx, id, CreateOptions{Agent: agent, Input: input, Actor: actor, Surface: surface})
}

// CreateOptions are what a run is created with by [Driver.CreateWith].
// The zero value is a run of the "" agent with no input.
type CreateOptions struct {
	Agent   string
	Input   json.RawMessage
	Actor   *events.Actor
	Surface string
	// Limits of this run: a zero field takes the driver's
	// ([Config.Limits]), [NoLimit] asks for none.
	Limits events.Limits
}

// CreateWith starts run id as [Driver.Create] does, with the options' own
// limits applied over the driver's (see [ApplyLimits]); the limits the run
// runs under are recorded in its run.created. A bad limit is an error and
// nothing is recorded.
func (d *Driver) CreateWith(ctx context.Context, id string, o CreateOptions) (*Run, error) {
	limits, err := ApplyLimits(o.Limits, d.cfg.Limits)
	if err != nil {
		return nil, fmt.Errorf("create run %s: %w", id, err)
	}
	body := events.RunCreatedBody{Tools: d.Tools(), Limits: limits, Input: o.Input, Agent: o.Agent, Actor: o.Actor.Clone(), Surface: o.Surface, Withheld: d.withheld()}
	r := &Run{}
	if err := d.append(ctx, r, id, events.RunCreated, body); err != nil {
		return nil, err
	}
	return r, nil
}

// Load reads run id from the log and folds it.
func (d *Driver) Load(ctx context.Context, id string) (*Run, error) {
	recs, tail, err := d.log.Read(ctx, id)
	if err != nil {
		return nil, err
	}
	return foldRecords(projector.View{}, tail, events.Tail{}, recs)
}

// LoadFrom rebuilds run id from a snapshot (a view and the tail it covers)
// plus the events after it. A snapshot that does not chain onto the log is
// refused ([events.ErrBrokenChain]); the caller falls back to [Driver.Load].
func (d *Driver) LoadFrom(ctx context.Context, id string, snap projector.View, at events.Tail) (*Run, error) {
	recs, tail, err := d.log.Since(ctx, id, at)
	if err != nil {
		return nil, err
	}
	r, err := foldRecords(snap.Clone(), tail, at, recs)
	if err != nil {
		return nil, err
	}
	r.cached = at.Count > 0
	return r, nil
}

// verify makes r's view the fold of its events, when part of it came from
// a snapshot: a snapshot can make a worker faster, never make it act on
// something the events do not say. A snapshot that disagreed with the
// events at the same tail is logged.
func (d *Driver) verify(ctx context.Context, r *Run) error {
	if !r.cached {
		return nil
	}
	fresh, err := d.Load(ctx, r.ID())
	if err != nil {
		return err
	}
	if fresh.tail == r.tail && !reflect.DeepEqual(fresh.view, r.view) {
		d.cfg.Logger.Error("snapshot disagrees with the run's events; the events are used", "run", r.ID(), "events", r.tail.Count)
	}
	agent := r.agent
	if _, ok := r.Kept(); ok && fresh.tail == r.keptAt {
		fresh.kept, fresh.hasKept, fresh.keptAt = r.kept, true, fresh.tail
	}
	*r = *fresh
	r.agent = agent // the drive in progress goes on
	return nil
}

// Refresh brings r up to date with events others appended since it was
// loaded (an operator's decision, say).
func (d *Driver) Refresh(ctx context.Context, r *Run) error {
	recs, tail, err := d.log.Since(ctx, r.ID(), r.tail)
	if err != nil {
		return err
	}
	if tail == r.tail {
		return nil
	}
	nr, err := foldRecords(r.view.Clone(), tail, r.tail, recs)
	if err != nil {
		return err
	}
	// What came from a snapshot is still unverified with the events after
	// it folded on top.
	nr.cached = r.cached
	*r = *nr
	return nil
}

func foldRecords(v projector.View, tail, from events.Tail, recs []events.Record) (*Run, error) {
	for _, rec := range recs {
		if err := v.Apply(rec.Event); err != nil {
			return nil, err
		}
	}
	if v.Run.Events != tail.Count {
		return nil, fmt.Errorf("load run: folded %d events, tail says %d", v.Run.Events, tail.Count)
	}
	return &Run{view: v, tail: tail}, nil
}

// append records one event on r, fenced on r's tail, and folds it into r's
// view. On any error r is unchanged; on [events.ErrConflict] the caller must
// stop driving r.
func (d *Driver) append(ctx context.Context, r *Run, run string, k events.Kind, body any) error {
	p, err := d.begin(ctx, r, run, k, body)
	if err != nil {
		return err
	}
	return d.commit(ctx, r, p)
}

// pending is an event of r's on its way to the log, folded into a fork of
// r's view while the server stores it. Nothing may act on the fork before
// [Driver.commit] says the event was stored.
type pending struct {
	p    *events.Pending
	k    events.Kind
	body any
	view projector.View // r's view with the event folded in, unless fold is set
	fold error
	// next is the agent's input for view, when it will likely be asked
	// next (hasNext), and spec a pure agent's decision for view, judged
	// (hasSpec). Both are held by value: a pending is reused (Run.spare),
	// so neither costs an allocation a step.
	next    StepInput
	hasNext bool
	spec    foreseen
	hasSpec bool
}

// prepared is an event ready to append: body held to UTF-8 (see clean),
// and whether the fold may take body as it is.
type prepared struct {
	ev   events.Event
	body any
	held bool
}

// prepare builds the event of kind k with body for run.
func (d *Driver) prepare(run string, k events.Kind, body any) (prepared, error) {
	body, held := clean(body)
	ev, err := events.New(run, k, body)
	if err != nil {
		return prepared{}, err
	}
	ev.Time = d.cfg.Now().UTC()
	return prepared{ev: ev, body: body, held: held}, nil
}

// begin publishes one event of r's, fenced on r's tail, and folds it into a
// fork of r's view. r is unchanged until commit.
func (d *Driver) begin(ctx context.Context, r *Run, run string, k events.Kind, body any) (*pending, error) {
	e, err := d.prepare(run, k, body)
	if err != nil {
		return nil, err
	}
	return d.send(ctx, r, e)
}

// send publishes a prepared event (see begin).
func (d *Driver) send(ctx context.Context, r *Run, e prepared) (*pending, error) {
	k, body := e.ev.Kind, e.body
	if d.cfg.BeforeAppend != nil {
		d.cfg.BeforeAppend(k, body)
	}
	start := time.Now()
	pa := r.spare
	r.spare = nil
	var spare *events.Pending
	if pa != nil {
		spare = pa.p
	}
	p, err := d.log.BeginReusing(ctx, spare, r.tail, e.ev)
	if err != nil {
		if d.cfg.OnAppend != nil {
			d.cfg.OnAppend(k, body, time.Since(start), err)
		}
		return nil, err
	}
	if pa == nil {
		pa = new(pending)
	}
	// Field by field: a composite literal of the whole pending (2.6 KB,
	// with the next input and decision it holds by value) is built on the
	// stack first, and the deeper stack costs each run's goroutine again
	// when the collector shrinks it. A pending comes zeroed but for its
	// Pending (new, or as commit leaves the spare).
	pa.p, pa.k, pa.body, pa.fold = p, k, body, nil
	pa.view = r.view.Fork()
	fold := body
	if !e.held {
		fold = nil // fold the stored bytes, decoded
	}
	if err := pa.view.ApplyWith(p.Event(), fold); err != nil {
		pa.fold = fmt.Errorf("fold own event: %w", err)
	} else if _, blind := r.agent.(Stepper); !blind && k == events.StepObserved && !pa.view.Run.Status.Ended() && !closed(r.stop) {
		// An observation is most often followed by the agent's next
		// decision: copy the view for it now, while the server works,
		// and a pure agent is asked for it too (see [Pure]). A
		// [Stepper] is given no copy.
		pa.next = d.stepInput(&pa.view)
		if pure, ok := r.agent.(Pure); ok && !r.cached && d.asksAgentNext(&pa.view) {
			pa.hasSpec = d.foresee(ctx, &pa.view, pa.next, pure, &pa.spec)
		}
		pa.hasNext = !pa.hasSpec
	}
	return pa, nil
}

// commit waits for p's append and, once it is stored, makes r the view
// folded with it. On any error r is unchanged.
func (d *Driver) commit(ctx context.Context, r *Run, p *pending) error {
	_, err := p.p.Wait(ctx)
	if d.cfg.OnAppend != nil {
		d.cfg.OnAppend(p.k, p.body, p.p.Took(), err)
	}
	if err != nil {
		if !errors.Is(err, events.ErrConflict) {
			r.lost, r.lostCall = p.p.Stored(), callOf(p.k, p.body)
		}
		return err
	}
	if p.fold != nil {
		return p.fold
	}
	r.view = p.view
	r.tail = p.p.Tail()
	r.mineCall = callOf(p.k, p.body)
	// One field at a time, for the stack's sake (see send).
	r.next = p.next
	r.hasNext, r.nextAt = p.hasNext, r.tail
	r.spec = p.spec
	r.hasSpec, r.specAt = p.hasSpec, r.tail
	kept := p.p
	*p = pending{} // let go of what it held but the append's memory
	p.p = kept
	r.spare = p
	return nil
}

// Policy returns the driver's policy.
func (d *Driver) Policy() policy.Policy { return d.policy }

// PolicyID returns the id of the driver's policy ("" for none).
func (d *Driver) PolicyID() string { return d.policyID }

// NeedsAgent reports whether driving r now would ask the agent for a
// decision: a worker without r's agent can still settle its approvals and
// recover its calls, but not move it on.
//
// A run waiting on a granted budget approval needs the agent too: its
// next attempt uses the grant.
func (d *Driver) NeedsAgent(r *Run) bool {
	return d.asksAgentNext(&r.view) || r.view.BudgetGrant() != nil
}

// Fail ends r as failed with reason and detail, one fenced append: for a
// run nobody can drive (its agent is offered by no worker, say).
func (d *Driver) Fail(ctx context.Context, r *Run, reason events.EndReason, detail string) error {
	return d.append(ctx, r, r.ID(), events.RunFailed, events.EndBody{Reason: reason, Detail: detail})
}

// closed reports whether ch is closed (a nil ch never is).
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
