package traces

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys of a step's span.
const (
	AttrRun      = attribute.Key("arbiter.run")
	AttrStep     = attribute.Key("arbiter.step")
	AttrTool     = attribute.Key("arbiter.tool")
	AttrOutcome  = attribute.Key("arbiter.outcome")
	AttrPolicyID = attribute.Key("arbiter.policy_id")
	AttrObserved = attribute.Key("arbiter.observation")
	AttrApproval = attribute.Key("arbiter.approval")
	// The timings, in milliseconds: the agent's decision (from the run's
	// previous event to the decision), the policy (from the decision to its
	// result), the tool (from the allow to the observation), the wait for
	// an operator (from the request to the result that consumed it) and
	// the appends (the sum, over the step's events, of the time from a
	// worker making the event to the server storing it).
	AttrDecisionMS = attribute.Key("arbiter.decision_ms")
	AttrPolicyMS   = attribute.Key("arbiter.policy_ms")
	AttrToolMS     = attribute.Key("arbiter.tool_ms")
	AttrApprovalMS = attribute.Key("arbiter.approval_wait_ms")
	AttrAppendsMS  = attribute.Key("arbiter.appends_ms")
)

// Config is what a tracer reads and where its spans go.
type Config struct {
	// Log is the runs log. Required.
	Log *events.Log
	// Tracer makes the spans (from an SDK tracer provider with an OTLP
	// exporter, say). Required.
	Tracer trace.Tracer
	// FromStart reads every stream from its first message; by default a
	// tracer starts at each stream's end, tracing what happens from now on.
	FromStart bool
	// Poll is how often a tracer looks for new events. Default 500ms.
	Poll time.Duration
}

// Tracer follows the log and ends a span for each step when the step has
// its observation (or its run ends).
type Tracer struct {
	cfg  Config
	next []uint64
	runs map[string]*runState
}

// runState is what a tracer holds of a run between events: the steps open
// and the time of its last event.
type runState struct {
	last  time.Time
	steps map[int]*stepState
}

type stepState struct {
	start, decided, policy, allowed, requested, end time.Time
	tool, outcome, policyID, observed, approval     string
	appends                                         time.Duration
	failed                                          bool
}

// New returns a tracer for cfg. It does no I/O.
func New(cfg Config) (*Tracer, error) {
	if cfg.Log == nil || cfg.Tracer == nil {
		return nil, errors.New("traces config: Log and Tracer are required")
	}
	if cfg.Poll == 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	return &Tracer{cfg: cfg, runs: map[string]*runState{}}, nil
}

// Run follows every shard until ctx is done (nil) or a read fails.
func (t *Tracer) Run(ctx context.Context) error {
	tick := time.NewTicker(t.cfg.Poll)
	defer tick.Stop()
	for {
		if err := t.Step(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Step reads what every shard stored since the last step (the first step
// starts where Config.FromStart says) and ends the spans of the steps it
// completes. A tracer is not safe for concurrent use: call Step from one
// goroutine, or use Run.
func (t *Tracer) Step(ctx context.Context) error {
	log := t.cfg.Log
	if t.next == nil {
		next := make([]uint64, log.Config().Shards)
		for k := range next {
			next[k] = 1
			if !t.cfg.FromStart {
				s, err := log.JetStream().Stream(ctx, log.StreamName(k))
				if err != nil {
					return fmt.Errorf("traces: %w", err)
				}
				next[k] = s.CachedInfo().State.LastSeq + 1
			}
		}
		t.next = next
	}
	for k := range t.next {
		for {
			msgs, err := jsinbox.GetBatch(ctx, log.JetStream(), log.StreamName(k), t.next[k], jsinbox.MaxBatch, "")
			if err != nil {
				return fmt.Errorf("traces: read %s: %w", log.StreamName(k), err)
			}
			for _, m := range msgs {
				t.event(ctx, m)
				t.next[k] = m.Sequence + 1
			}
			if len(msgs) < 1024 {
				break
			}
		}
	}
	return nil
}

// event folds one stored message into its run's open steps. A message that
// is not an event of its subject is skipped: a tracer reports timings, it
// does not audit (the readers that act verify the chain).
func (t *Tracer) event(ctx context.Context, m *jetstream.RawStreamMsg) {
	e, err := events.Decode(m.Data)
	if err != nil || t.cfg.Log.CheckStored(m.Subject, m.Header, e) != nil {
		return
	}
	r := t.runs[e.Run]
	if r == nil {
		r = &runState{steps: map[int]*stepState{}}
		t.runs[e.Run] = r
	}
	appendTook := max(m.Time.Sub(e.Time), 0)
	prev := r.last
	r.last = e.Time
	step := func(n int) *stepState {
		s := r.steps[n]
		if s == nil {
			s = &stepState{start: prev}
			r.steps[n] = s
		}
		s.appends += appendTook
		return s
	}
	if o, ok, _ := events.Observed(e); ok {
		// A step.observed, or the terminal tool's result a run's end
		// carries (ADR 0017): the step's span ends with it.
		s := step(o.Step)
		s.observed, s.failed = string(o.Kind), o.Kind != events.ObsResult
		t.end(ctx, e.Run, o.Step, s, e.Time)
	}
	switch e.Kind {
	case events.StepDecided:
		b, _ := events.DecodeBody[events.StepDecidedBody](e)
		s := step(b.Step)
		s.decided, s.tool = e.Time, b.Tool
		if s.start.IsZero() {
			s.start = e.Time
		}
		if b.Policy != nil {
			t.ruled(ctx, e, *b.Policy, s)
		}
	case events.StepPolicy, events.ApprovalRequested:
		b, _ := events.DecodeBody[events.PolicyBody](e)
		t.ruled(ctx, e, b, step(b.Step))
	case events.RunFinished, events.RunFailed, events.RunCancelled:
		for n, s := range r.steps {
			s.observed = string(e.Kind)
			t.end(ctx, e.Run, n, s, e.Time)
		}
		delete(t.runs, e.Run)
	}
}

// ruled notes policy result b of step s, recorded by event e (its own
// event, or its decision's).
func (t *Tracer) ruled(ctx context.Context, e events.Event, b events.PolicyBody, s *stepState) {
	if s.policy.IsZero() {
		s.policy = e.Time
	}
	s.outcome, s.policyID = string(b.Outcome), b.PolicyID
	if b.Approval != nil {
		s.requested, s.approval = e.Time, b.Approval.ID
	}
	if b.Outcome == events.Allow || b.Consumes != "" {
		s.allowed = e.Time
	}
	if b.Outcome == events.Deny || b.Outcome == events.Abort {
		t.end(ctx, e.Run, b.Step, s, e.Time)
	}
}

// end ends step n's span and forgets the step.
func (t *Tracer) end(ctx context.Context, run string, n int, s *stepState, at time.Time) {
	delete(t.runs[run].steps, n)
	ms := func(from, to time.Time) int64 {
		if from.IsZero() || to.IsZero() || to.Before(from) {
			return 0
		}
		return to.Sub(from).Milliseconds()
	}
	attrs := []attribute.KeyValue{
		AttrRun.String(run), AttrStep.Int(n), AttrTool.String(s.tool), AttrOutcome.String(s.outcome),
		AttrPolicyID.String(s.policyID), AttrObserved.String(s.observed),
		AttrDecisionMS.Int64(ms(s.start, s.decided)), AttrPolicyMS.Int64(ms(s.decided, s.policy)),
		AttrAppendsMS.Int64(s.appends.Milliseconds()),
	}
	if !s.allowed.IsZero() {
		attrs = append(attrs, AttrToolMS.Int64(ms(s.allowed, at)))
	}
	if s.approval != "" {
		attrs = append(attrs, AttrApproval.String(s.approval), AttrApprovalMS.Int64(ms(s.requested, s.allowed)))
	}
	start := s.start
	if start.IsZero() {
		start = s.decided
	}
	_, span := t.cfg.Tracer.Start(runContext(ctx, run), "step "+s.tool,
		trace.WithTimestamp(start), trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal))
	if s.failed {
		span.SetStatus(codes.Error, s.observed)
	}
	span.End(trace.WithTimestamp(at))
}

// TraceID is the trace every span of run belongs to: the first 16 bytes
// of the SHA-256 of the run's id, so any tracer, on any host, puts a run's
// steps in the same trace.
func TraceID(run string) trace.TraceID {
	sum := sha256.Sum256([]byte("arbiter.run/" + run))
	var id trace.TraceID
	copy(id[:], sum[:16])
	return id
}

// runContext is ctx with the run's trace as a remote parent, whose span id
// is derived from the run too.
func runContext(ctx context.Context, run string) context.Context {
	sum := sha256.Sum256([]byte("arbiter.run.span/" + run))
	var sid trace.SpanID
	copy(sid[:], sum[:8])
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: TraceID(run), SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
