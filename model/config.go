package model

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/arbiter-run/arbiter/events"
)

// Providers.
const (
	OpenAI    = "openai"    // Chat Completions, any compatible server by BaseURL
	Anthropic = "anthropic" // Messages
)

// ErrConfig marks a configuration [Config.Validate] refuses.
var ErrConfig = errors.New("bad model agent config")

// Config builds an [Agent]. Zero values are documented per field.
type Config struct {
	// Provider is OpenAI or Anthropic. Required.
	Provider string
	// BaseURL of the provider's API: for OpenAI and compatible servers
	// "http://HOST:PORT/v1", for Anthropic "http://HOST:PORT". Empty: the
	// provider's public API.
	BaseURL string
	// Model to ask. Required.
	Model string
	// APIKey, if the server wants one.
	APIKey string
	// System prompt; empty: none.
	System string
	// MaxTokens bounds each reply's output tokens, and is what an attempt
	// reserves of an output budget. Default 1024.
	MaxTokens int64
	// Temperature; nil: the provider's default.
	Temperature *float64
	// Tools offered to the model, by name; empty: every tool of the run.
	Tools []string
	// Timeout of one attempt, from sending the request to the whole reply.
	// Default 60s.
	Timeout time.Duration
	// Retries after a first attempt that failed in a way that may pass
	// (429, 408, 409, 5xx, a dropped connection, a timeout). Default 2;
	// negative: none.
	Retries int
	// Backoff before the first retry, doubled at each further one up to
	// MaxBackoff; a server's Retry-After (or retry-after-ms) is honoured
	// when longer. Defaults 500ms and 30s.
	Backoff, MaxBackoff time.Duration
	// MaxRetryAfter is the longest Retry-After the agent waits for; a
	// server asking for longer ends the call at once. Default 2m.
	MaxRetryAfter time.Duration
	// Budget of each run the agent drives; a zero field is no limit.
	Budget Budget
	// OverBudget says what a run does when its next attempt would pass
	// Budget. The zero value ends it budget_exceeded.
	OverBudget OverBudget
	// Prices of models in US dollars per million tokens, by model name.
	// A spend budget needs the price of Model.
	Prices map[string]Price
	// MaxResponse bounds the bytes of a reply's body kept in its event
	// (a larger one is recorded without it, its size noted, so the event
	// stays within the server's message limit). Default 256 KiB.
	MaxResponse int
	// HTTPClient the SDK sends with; nil: the SDK's default.
	HTTPClient *http.Client
}

// Budget bounds what one run's model calls may use. Every attempt counts
// as a call; an attempt whose outcome is unknown is charged what it
// reserved.
type Budget struct {
	Calls        int
	InputTokens  int64
	OutputTokens int64
	// SpendUSD is in US dollars.
	SpendUSD float64
}

// OverBudget is what a run does when its next attempt would pass its
// budget.
type OverBudget struct {
	// Approve pauses the run on an approval of kind budget
	// (events.ApprovalBudget) instead of ending it: a grant raises each
	// limit the attempt passes (see Raise) and the attempt is made; a
	// denial or an expiry ends the run budget_exceeded. False: the run
	// ends budget_exceeded at once.
	Approve bool
	// Raise is what one grant adds to each limit the attempt passes (and
	// to no other): for each such limit, this field, or, when it is
	// zero, the budget's own value (a grant allows as much again), and in
	// any case at least what the attempt lacks.
	Raise Budget
	// Expires is how long the approval waits for a decision, by the
	// agent's clock; zero: it does not expire.
	Expires time.Duration
}

// Price is what a model costs, in US dollars per million tokens.
type Price struct {
	Input  float64
	Output float64
}

// Validate checks c and fills in its defaults. Errors wrap [ErrConfig]
// and name the field at fault.
func (c *Config) Validate() error {
	switch c.Provider {
	case OpenAI, Anthropic:
	default:
		return fmt.Errorf("%w: provider %q (want %s or %s)", ErrConfig, c.Provider, OpenAI, Anthropic)
	}
	if c.Model == "" {
		return fmt.Errorf("%w: no model", ErrConfig)
	}
	if c.MaxTokens < 0 {
		return fmt.Errorf("%w: max_tokens %d is negative", ErrConfig, c.MaxTokens)
	}
	if c.Budget.SpendUSD < 0 || c.Budget.Calls < 0 || c.Budget.InputTokens < 0 || c.Budget.OutputTokens < 0 {
		return fmt.Errorf("%w: a budget is negative: %+v", ErrConfig, c.Budget)
	}
	for m, p := range c.Prices {
		if p.Input < 0 || p.Output < 0 || math.IsNaN(p.Input) || math.IsNaN(p.Output) {
			return fmt.Errorf("%w: price of %q is not a number of dollars: %+v", ErrConfig, m, p)
		}
	}
	if o := c.OverBudget; o.Raise.Calls < 0 || o.Raise.InputTokens < 0 || o.Raise.OutputTokens < 0 || o.Raise.SpendUSD < 0 || math.IsNaN(o.Raise.SpendUSD) || o.Expires < 0 {
		return fmt.Errorf("%w: over_budget: a raise or the expiry is negative: %+v", ErrConfig, o)
	}
	if c.OverBudget.Approve && c.Budget == (Budget{}) {
		return fmt.Errorf("%w: over_budget asks for an approval, but there is no budget to pass", ErrConfig)
	}
	if _, ok := c.Prices[c.Model]; c.Budget.SpendUSD > 0 && !ok {
		return fmt.Errorf("%w: a spend budget of $%g with no price for model %q (prices: %s)", ErrConfig, c.Budget.SpendUSD, c.Model, priceNames(c.Prices))
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 1024
	}
	if c.Timeout == 0 {
		c.Timeout = 60 * time.Second
	}
	if c.Retries == 0 {
		c.Retries = 2
	} else if c.Retries < 0 {
		c.Retries = 0
	}
	if c.Backoff == 0 {
		c.Backoff = 500 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.MaxResponse == 0 {
		c.MaxResponse = 256 << 10
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = 2 * time.Minute
	}
	return nil
}

func priceNames(p map[string]Price) string {
	if len(p) == 0 {
		return "none"
	}
	out := ""
	for m := range p {
		if out != "" {
			out += ", "
		}
		out += m
	}
	return out
}

// rates are a price in nano-USD per token (a dollar per million tokens is
// 1,000 nano-USD a token), so spend adds up in whole numbers.
type rates struct{ in, out int64 }

func (c *Config) rates() rates {
	p := c.Prices[c.Model]
	return rates{in: int64(math.Round(p.Input * 1000)), out: int64(math.Round(p.Output * 1000))}
}

func (r rates) spend(in, out int64) int64 { return in*r.in + out*r.out }

// limit is the budget in the units the events count.
func (b Budget) limit() events.ModelUsage {
	return events.ModelUsage{
		Calls: b.Calls, InputTokens: b.InputTokens, OutputTokens: b.OutputTokens,
		SpendNanoUSD: int64(math.Round(b.SpendUSD * 1e9)),
	}
}

// over says which part of the budget used plus reserve goes beyond, or "".
func over(limit, used, reserve events.ModelUsage) string {
	want := used.Add(reserve)
	switch {
	case limit.Calls > 0 && want.Calls > limit.Calls:
		return fmt.Sprintf("model calls: %d made + 1 more > budget %d", used.Calls, limit.Calls)
	case limit.InputTokens > 0 && want.InputTokens > limit.InputTokens:
		return fmt.Sprintf("input tokens: %d used + %d reserved > budget %d", used.InputTokens, reserve.InputTokens, limit.InputTokens)
	case limit.OutputTokens > 0 && want.OutputTokens > limit.OutputTokens:
		return fmt.Sprintf("output tokens: %d used + %d reserved > budget %d", used.OutputTokens, reserve.OutputTokens, limit.OutputTokens)
	case limit.SpendNanoUSD > 0 && want.SpendNanoUSD > limit.SpendNanoUSD:
		return fmt.Sprintf("spend: $%.6f used + $%.6f reserved > budget $%.6f", usd(used.SpendNanoUSD), usd(reserve.SpendNanoUSD), usd(limit.SpendNanoUSD))
	}
	return ""
}

func usd(nano int64) float64 { return float64(nano) / 1e9 }
