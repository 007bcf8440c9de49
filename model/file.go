package model

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// File is an agent as a worker's config file names it (YAML): durations
// are strings ("30s"), the API key is read from the environment variable
// APIKeyEnv, never written in the file.
type File struct {
	Provider      string           `yaml:"provider"`
	BaseURL       string           `yaml:"base_url"`
	Model         string           `yaml:"model"`
	APIKeyEnv     string           `yaml:"api_key_env"`
	System        string           `yaml:"system"`
	MaxTokens     int64            `yaml:"max_tokens"`
	Temperature   *float64         `yaml:"temperature"`
	Tools         []string         `yaml:"tools"`
	Timeout       string           `yaml:"timeout"`
	Retries       int              `yaml:"retries"`
	Backoff       string           `yaml:"backoff"`
	MaxBackoff    string           `yaml:"max_backoff"`
	MaxRetryAfter string           `yaml:"max_retry_after"`
	MaxResponse   int              `yaml:"max_response"`
	Budget        FileBudget       `yaml:"budget"`
	OverBudget    FileOverBudget   `yaml:"over_budget"`
	Prices        map[string]Price `yaml:"prices"`
}

// FileBudget is [Budget] in the file.
type FileBudget struct {
	Calls        int     `yaml:"calls"`
	InputTokens  int64   `yaml:"input_tokens"`
	OutputTokens int64   `yaml:"output_tokens"`
	SpendUSD     float64 `yaml:"spend_usd"`
}

// FileOverBudget is [OverBudget] in the file: approve: true pauses a run
// over its budget on an approval of kind budget; raise is what a grant
// adds to each limit passed; expires is a duration ("1h").
type FileOverBudget struct {
	Approve bool       `yaml:"approve"`
	Raise   FileBudget `yaml:"raise"`
	Expires string     `yaml:"expires"`
}

// Config turns f into a checked [Config]: getenv reads the API key, and
// tools are the names of the tools the worker has, which every tool f
// offers must be one of. Errors wrap [ErrConfig] and name the field.
func (f File) Config(getenv func(string) string, tools []string) (Config, error) {
	c := Config{
		Provider: f.Provider, BaseURL: f.BaseURL, Model: f.Model, System: f.System,
		MaxTokens: f.MaxTokens, Temperature: f.Temperature, Tools: f.Tools, Retries: f.Retries, MaxResponse: f.MaxResponse,
		Budget: Budget(f.Budget), Prices: f.Prices,
		OverBudget: OverBudget{Approve: f.OverBudget.Approve, Raise: Budget(f.OverBudget.Raise)},
	}
	if f.APIKeyEnv != "" {
		c.APIKey = getenv(f.APIKeyEnv)
		if c.APIKey == "" {
			return c, fmt.Errorf("%w: api_key_env: $%s is empty or not set", ErrConfig, f.APIKeyEnv)
		}
	}
	for _, t := range f.Tools {
		if !slices.Contains(tools, t) {
			return c, fmt.Errorf("%w: tools: no tool named %q (the worker has %s)", ErrConfig, t, strings.Join(tools, ", "))
		}
	}
	for _, d := range []struct {
		name, text string
		to         *time.Duration
	}{{"timeout", f.Timeout, &c.Timeout}, {"backoff", f.Backoff, &c.Backoff}, {"max_backoff", f.MaxBackoff, &c.MaxBackoff}, {"max_retry_after", f.MaxRetryAfter, &c.MaxRetryAfter}, {"over_budget.expires", f.OverBudget.Expires, &c.OverBudget.Expires}} {
		if d.text == "" {
			continue
		}
		v, err := time.ParseDuration(d.text)
		if err != nil || v <= 0 {
			return c, fmt.Errorf("%w: %s %q is not a positive duration (like 30s)", ErrConfig, d.name, d.text)
		}
		*d.to = v
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}
