package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/render"
)

// Errors a run can end with (agent_error, the detail naming them).
var (
	// ErrRefused: the model refused (a refusal, or a content filter).
	ErrRefused = errors.New("the model refused")
	// ErrCut: a reply with no tool call was cut at the token limit.
	ErrCut = errors.New("the model's reply was cut at the token limit")
	// ErrEmpty: a reply with neither text nor a tool call.
	ErrEmpty = errors.New("the model's reply is empty")
	// ErrProvider: the provider refused the request for good (a 4xx other
	// than 408, 409 and 429, or a Retry-After too long to wait for).
	ErrProvider = errors.New("the provider refused the request")
	// ErrRetries: every attempt failed in a way that might have passed.
	ErrRetries = errors.New("the model call failed on every attempt")
	// ErrNoRecorder: Decide was called without the driver's recorder.
	ErrNoRecorder = errors.New("no recorder for model calls in the step input")
)

// Agent is a [driver.Agent] backed by a chat model. It is safe for
// concurrent use by many runs.
type Agent struct {
	cfg   Config
	p     provider
	rates rates
	convs *cache
}

var _ driver.Agent = (*Agent)(nil)

// New checks cfg (see [Config.Validate]) and builds an agent. It does not
// dial.
func New(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new model agent: %w", err)
	}
	a := &Agent{cfg: cfg, rates: cfg.rates(), convs: newCache(4096)}
	switch cfg.Provider {
	case OpenAI:
		a.p = newOpenAI(&a.cfg)
	case Anthropic:
		a.p = newAnthropic(&a.cfg)
	}
	return a, nil
}

// Decide returns the next step of the run. When the run's last recorded
// reply has a tool call no step took yet, it is that call, and the model
// is not asked. Otherwise it checks the budget, asks the model (recording
// each attempt and its outcome through in.Record, retrying what may pass)
// and decides from the reply: its first tool call, or its text as the
// final answer. Over budget it returns a [driver.EndError] with reason
// budget_exceeded; a refusal, a cut or empty reply, a permanent provider
// error or exhausted retries are errors wrapping [ErrRefused], [ErrCut],
// [ErrEmpty], [ErrProvider] or [ErrRetries].
func (a *Agent) Decide(ctx context.Context, in driver.StepInput) (driver.Action, error) {
	if m := in.Model; m.Last != nil {
		if k := in.Steps.Len() - m.LastAt; k < len(m.Last.ToolCalls) || (k == 0 && m.Open == nil) {
			// The log holds the reply this step comes from.
			return decide(*m.Last, k)
		}
	}
	if in.Record == nil {
		return driver.Action{}, ErrNoRecorder
	}
	c := a.conversation(in)
	reply, err := a.ask(ctx, in, c)
	if errors.Is(err, driver.ErrWaiting) {
		a.convs.put(in.Run.ID, c)
	}
	if err != nil {
		return driver.Action{}, err
	}
	dec, err := decide(reply, 0)
	if err == nil && dec.Final == nil {
		a.convs.put(in.Run.ID, c)
	}
	return dec, err
}

// budgetGrant is the granted budget approval the run waits on, which the
// next attempt uses, or nil.
func budgetGrant(in driver.StepInput) *projector.Approval {
	if in.Run.Status != projector.Waiting {
		return nil
	}
	for i := len(in.Approvals) - 1; i >= 0; i-- {
		if a := &in.Approvals[i]; a.Kind == events.BudgetApproval && a.State == projector.Granted {
			return a
		}
	}
	return nil
}

// decide is the k-th decision a recorded reply makes (from 0): its k-th
// tool call, or, for a reply with no tool call, its final answer or the
// error it ends the run with.
func decide(r events.ModelReplyBody, k int) (driver.Action, error) {
	if k < len(r.ToolCalls) {
		tc := r.ToolCalls[k]
		d := driver.Action{Tool: tc.Name, Args: json.RawMessage(tc.Args), CallID: tc.ID}
		if k == 0 {
			d.Reason = r.Text
		}
		return d, nil
	}
	switch {
	case r.Refusal != "":
		return driver.Action{}, fmt.Errorf("%w (finish %q): %s", ErrRefused, r.Finish, r.Refusal)
	case r.Finish == "length" || r.Finish == string(anthropicCut):
		return driver.Action{}, fmt.Errorf("%w: %d output tokens, text so far: %q", ErrCut, r.Usage.OutputTokens, clip(r.Text, 200))
	case r.Text == "":
		return driver.Action{}, fmt.Errorf("%w (finish %q)", ErrEmpty, r.Finish)
	}
	return driver.Action{Final: &driver.Answer{Text: r.Text}}, nil
}

// conversation returns the run's rendered messages, brought up to date
// with the steps it lacks: a cached one extended by the new steps only.
func (a *Agent) conversation(in driver.StepInput) conversation {
	c := a.convs.take(in.Run.ID)
	if c == nil || c.steps() > in.Steps.Len() {
		c = a.p.start(a.cfg.System, inputText(in.Run.Input))
	}
	c.add(render.From(in.Steps, c.steps()))
	return c
}

// inputText is a run's input as the model reads it: a JSON string's
// value, or the JSON itself.
func inputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// ask sends the request until a reply comes or the attempts run out,
// recording each attempt and its outcome.
func (a *Agent) ask(ctx context.Context, in driver.StepInput, c conversation) (events.ModelReplyBody, error) {
	tools := offered(in.Tools, a.cfg.Tools)
	used := in.Model.Charged()
	limit := a.cfg.Budget.limit().Raised(in.Model.Raised)
	grant := budgetGrant(in)
	call, n := in.Model.Replies+1, in.Model.Attempts
	var last error
	for try := 0; try <= a.cfg.Retries; try++ {
		n++
		reserve := a.reserve(c, tools)
		at := events.ModelAttemptBody{Call: call, Attempt: n, Provider: a.cfg.Provider, Model: a.cfg.Model, Reserve: reserve, SideEffect: events.SideEffectNone}
		at.Limit = limit
		if grant != nil {
			at.Limit, at.Grant = limit.Raised(grant.Raise), grant.ID
		}
		if why := over(at.Limit, used, reserve); why != "" {
			if !a.cfg.OverBudget.Approve {
				return events.ModelReplyBody{}, &driver.EndError{Reason: events.ReasonBudgetExceeded, Detail: why}
			}
			// A grant not enough for this attempt (the config changed
			// since it was asked for) is superseded by the new request.
			why = over(limit, used, reserve)
			return events.ModelReplyBody{}, a.pause(ctx, in, events.BudgetBody{Call: call, Attempt: n, Limit: limit, Used: used, Reserve: reserve, Over: why})
		}
		if err := in.Record(ctx, events.ModelAttempted, at); err != nil {
			return events.ModelReplyBody{}, err
		}
		limit, grant = at.Limit, nil
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
		reply, err := a.p.send(actx, c, tools)
		cancel()
		took := time.Since(start).Milliseconds()
		if err == nil {
			reply.Call, reply.Attempt, reply.LatencyMS = call, n, took
			reply.Usage.Calls = 1
			reply.Usage.SpendNanoUSD = a.rates.spend(reply.Usage.InputTokens, reply.Usage.OutputTokens)
			if len(reply.Response) > a.cfg.MaxResponse {
				reply.Response, reply.ResponseOmitted = "", len(reply.Response)
			}
			return a.recordReply(ctx, in, reply)
		}
		if ctx.Err() != nil {
			return events.ModelReplyBody{}, ctx.Err()
		}
		f := a.p.classify(err)
		fail := events.ModelFailBody{Call: call, Attempt: n, Status: f.status, Error: f.msg, Retryable: f.retryable, RetryAfterMS: f.retryAfter.Milliseconds(), LatencyMS: took, Charge: events.ModelUsage{Calls: 1}}
		if f.unknown {
			fail.Charge = reserve
		}
		if err := in.Record(ctx, events.ModelFailed, fail); err != nil {
			return events.ModelReplyBody{}, err
		}
		used = used.Add(fail.Charge)
		if !f.retryable {
			return events.ModelReplyBody{}, fmt.Errorf("%w: %s %s: %s", ErrProvider, a.cfg.Provider, a.cfg.Model, f.msg)
		}
		last = fmt.Errorf("attempt %d: %s", n, f.msg)
		if try == a.cfg.Retries {
			break
		}
		wait := a.backoff(try)
		if f.retryAfter > a.cfg.MaxRetryAfter {
			return events.ModelReplyBody{}, fmt.Errorf("%w: %s asks to retry after %s (longest wait %s): %s", ErrProvider, a.cfg.Provider, f.retryAfter, a.cfg.MaxRetryAfter, f.msg)
		}
		wait = max(wait, f.retryAfter)
		if err := sleep(ctx, wait); err != nil {
			return events.ModelReplyBody{}, err
		}
	}
	return events.ModelReplyBody{}, fmt.Errorf("%w (%d attempts of %s %s): %w", ErrRetries, a.cfg.Retries+1, a.cfg.Provider, a.cfg.Model, last)
}

// pause records a budget approval for the attempt b names, raising each
// limit it passes by the configured raise (at least what it lacks), and
// returns the error that tells the driver the run waits.
func (a *Agent) pause(ctx context.Context, in driver.StepInput, b events.BudgetBody) error {
	b.Raise = a.raise(b.Limit, b.Used.Add(b.Reserve))
	n := 1
	for _, ap := range in.Approvals {
		if ap.Kind == events.BudgetApproval {
			n++
		}
	}
	b.Approval = events.ApprovalRequest{ID: fmt.Sprintf("budget-%d", n), Reason: "model budget: " + b.Over}
	if ttl := a.cfg.OverBudget.Expires; ttl > 0 {
		at := time.Now().Add(ttl).UTC()
		b.Approval.ExpiresAt = &at
	}
	b, err := approvals.Budget(b)
	if err != nil {
		return err
	}
	if err := in.Record(ctx, events.ApprovalBudget, b); err != nil {
		return err
	}
	return fmt.Errorf("%w: approval %s: %s", driver.ErrWaiting, b.Approval.ID, b.Over)
}

// raise is what a grant adds for an attempt that would bring the run to
// want: for each limit want passes, the configured raise (or the budget's
// own value), and at least the shortfall.
func (a *Agent) raise(limit, want events.ModelUsage) events.ModelUsage {
	step, base := a.cfg.OverBudget.Raise.limit(), a.cfg.Budget.limit()
	pick := func(l, w, s, b int64) int64 {
		if l <= 0 || w <= l {
			return 0
		}
		if s <= 0 {
			s = b
		}
		return max(s, w-l)
	}
	return events.ModelUsage{
		Calls:        int(pick(int64(limit.Calls), int64(want.Calls), int64(step.Calls), int64(base.Calls))),
		InputTokens:  pick(limit.InputTokens, want.InputTokens, step.InputTokens, base.InputTokens),
		OutputTokens: pick(limit.OutputTokens, want.OutputTokens, step.OutputTokens, base.OutputTokens),
		SpendNanoUSD: pick(limit.SpendNanoUSD, want.SpendNanoUSD, step.SpendNanoUSD, base.SpendNanoUSD),
	}
}

// recordReply records reply; one too large for the log is recorded
// without its body, and one too large even so is a failure charged what
// the reply used (ErrTooLarge: the run ends agent_error).
func (a *Agent) recordReply(ctx context.Context, in driver.StepInput, reply events.ModelReplyBody) (events.ModelReplyBody, error) {
	err := in.Record(ctx, events.ModelReplied, reply)
	if errors.Is(err, events.ErrTooLarge) && reply.Response != "" {
		reply.Response, reply.ResponseOmitted = "", len(reply.Response)
		err = in.Record(ctx, events.ModelReplied, reply)
	}
	if !errors.Is(err, events.ErrTooLarge) {
		return reply, err
	}
	size := len(reply.Text) + len(reply.Refusal)
	for _, tc := range reply.ToolCalls {
		size += len(tc.Name) + len(tc.Args) + len(tc.ID)
	}
	fail := events.ModelFailBody{Call: reply.Call, Attempt: reply.Attempt, Error: fmt.Sprintf("the reply (%d bytes of text and calls) is too large to record", size), Charge: reply.Usage, LatencyMS: reply.LatencyMS}
	if ferr := in.Record(ctx, events.ModelFailed, fail); ferr != nil {
		return events.ModelReplyBody{}, ferr
	}
	return events.ModelReplyBody{}, fmt.Errorf("%s %s: %s: %w", a.cfg.Provider, a.cfg.Model, fail.Error, events.ErrTooLarge)
}

// reserve is what an attempt reserves of the budget: one call, at most
// MaxTokens of output, and the prompt's input tokens estimated at one
// per three bytes (most tokenizers give fewer), priced.
func (a *Agent) reserve(c conversation, tools []events.ToolSpec) events.ModelUsage {
	size := c.size()
	for _, t := range tools {
		size += len(t.Name) + len(t.Description) + len(t.Schema)
	}
	in := int64(size+2) / 3
	out := a.cfg.MaxTokens
	return events.ModelUsage{Calls: 1, InputTokens: in, OutputTokens: out, SpendNanoUSD: a.rates.spend(in, out)}
}

func (a *Agent) backoff(try int) time.Duration {
	d := a.cfg.Backoff
	for range try {
		d *= 2
		if d >= a.cfg.MaxBackoff {
			return a.cfg.MaxBackoff
		}
	}
	return min(d, a.cfg.MaxBackoff)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// offered is the run's tools the config offers, in the run's order.
func offered(tools []events.ToolSpec, names []string) []events.ToolSpec {
	if len(names) == 0 {
		return tools
	}
	out := make([]events.ToolSpec, 0, len(names))
	for _, t := range tools {
		for _, n := range names {
			if t.Name == n {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
