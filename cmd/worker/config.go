package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/limitsconf"
	"github.com/arbiter-run/arbiter/mcp"
	"github.com/arbiter-run/arbiter/model"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/toolbox"
	"go.yaml.in/yaml/v3"
)

// Config is the worker's configuration file (YAML). Every field is optional;
// the zero value runs the demo setup: every built-in tool, the default
// side-effect policy and a scripted "demo" agent.
type Config struct {
	// Sandbox is the directory the built-in tools work in. Default
	// <data>/sandbox.
	Sandbox string `yaml:"sandbox"`
	// Tools to register; default: every built-in tool.
	Tools []ToolConfig `yaml:"tools"`
	// Policy: the side-effect mapping and its id.
	Policy PolicyConfig `yaml:"policy"`
	// Operators: public nkeys (U…) whose signed decisions are accepted, with
	// a name each.
	Operators map[string]string `yaml:"operators"`
	// ApprovalTTL: how long an approval waits when the policy sets no
	// expiry ("24h"); empty: no expiry.
	ApprovalTTL string `yaml:"approval_ttl"`
	// Limits of runs this worker creates.
	Limits LimitsConfig `yaml:"limits"`
	// Agents: scripted agents by name.
	Agents map[string][]CallConfig `yaml:"agents"`
	// Models: agents backed by a chat model, by name (see model.File).
	Models map[string]model.File `yaml:"models"`
	// RunDefaults: for an agent (of agents, models, or "demo"), the actor
	// and surface its runs are recorded with when whoever starts one names
	// none. The worker advertises them with the agent; `arbiter start`
	// records them in run.created (see fleet.RunDefaults). An actor or
	// surface the starter names wins; a run already recorded is never
	// changed.
	RunDefaults map[string]RunDefaultsConfig `yaml:"run_defaults"`
	// Log: stream layout (must match every other worker's).
	Log LogConfig `yaml:"log"`
	// Durability is what an acknowledged append of the embedded server
	// survives: process (the default) or machine (see --durability).
	Durability string `yaml:"durability"`
	// MCP: MCP servers whose classified, pinned tools are offered beside
	// the built-in ones (see the mcp package; "arbiter mcp pin" writes the
	// lock file). A relative lock path is relative to the config file.
	MCP mcp.Config `yaml:"mcp"`
}

// ToolConfig selects a built-in tool.
type ToolConfig struct {
	Name    string            `yaml:"name"`
	Class   events.SideEffect `yaml:"class"`
	Timeout string            `yaml:"timeout"`
	// Data, Tags and Resource are recorded with the tool's spec for rules
	// files to target (data categories, operation tags, the argument that
	// names the resource).
	Data     []string `yaml:"data"`
	Tags     []string `yaml:"tags"`
	Resource string   `yaml:"resource"`
}

// PolicyConfig is the built-in side-effect policy, and optionally a rules
// file combined with it (every rule and the mapping are asked; deny wins).
type PolicyConfig struct {
	ID          string            `yaml:"id"`
	SideEffects map[string]string `yaml:"side_effects"`
	// Rules is the path of a rules file (see docs/rules.schema.json),
	// relative to the working directory.
	Rules string `yaml:"rules"`
	// RateBucket is the KV bucket of the rules file's fleet-wide windows
	// (per: fleet); default ARB_RATES, the one the embedded server and
	// docs/nats-server.conf let the worker user write.
	RateBucket string `yaml:"rate_bucket"`
	// Shadow is the path of a candidate rules file run in shadow mode: its
	// answer is recorded on every step and never enforced (arbiter shadow).
	Shadow string `yaml:"shadow"`
}

// LimitsConfig is the limits of runs this worker creates itself (a run
// started by a client records its own), as the file spells them.
type LimitsConfig = limitsconf.Config

// RunDefaultsConfig is fleet.RunDefaults in the file.
type RunDefaultsConfig struct {
	Actor   *ActorConfig `yaml:"actor"`
	Surface string       `yaml:"surface"`
}

// ActorConfig is events.Actor in the file.
type ActorConfig struct {
	ID         string            `yaml:"id"`
	Roles      []string          `yaml:"roles"`
	Attributes map[string]string `yaml:"attributes"`
}

// runDefaults checks the run_defaults section against the worker's agents
// and returns it as the fleet takes it.
func (c Config) runDefaults(agents map[string]driver.Agent) (map[string]fleet.RunDefaults, error) {
	if len(c.RunDefaults) == 0 {
		return nil, nil
	}
	out := make(map[string]fleet.RunDefaults, len(c.RunDefaults))
	for name, rc := range c.RunDefaults {
		if _, ok := agents[name]; !ok {
			return nil, fmt.Errorf("run_defaults.%s: no agent of that name (agents: %s)", name, strings.Join(slices.Sorted(maps.Keys(agents)), ", "))
		}
		d := fleet.RunDefaults{Surface: rc.Surface}
		if a := rc.Actor; a != nil {
			d.Actor = &events.Actor{ID: a.ID, Roles: a.Roles, Attributes: a.Attributes}
		}
		if err := d.Validate(); err != nil {
			return nil, fmt.Errorf("run_defaults.%s: %w", name, err)
		}
		out[name] = d
	}
	return out, nil
}

// CallConfig is one scripted decision.
type CallConfig struct {
	Tool string `yaml:"tool"`
	Args string `yaml:"args"`
}

// LogConfig is the events.Config part of the file.
type LogConfig struct {
	Stream   string `yaml:"stream"`
	Prefix   string `yaml:"prefix"`
	Shards   int    `yaml:"shards"`
	Replicas int    `yaml:"replicas"`
}

func loadConfig(path string) (Config, error) {
	var c Config
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	dec := yaml.NewDecoder(bytesReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	if c.MCP.Lock != "" && !filepath.IsAbs(c.MCP.Lock) {
		c.MCP.Lock = filepath.Join(filepath.Dir(path), c.MCP.Lock)
	}
	if err := c.MCP.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// mcpTools connects to the configured MCP servers and returns the tools
// they offer, and what closes them. A missing lock file is an error: no
// tool is offered before it is reviewed and pinned.
func (c Config) mcpTools(ctx context.Context, logger *slog.Logger) ([]driver.Tool, func(), error) {
	set, err := c.mcpSet(ctx, logger)
	if err != nil || set == nil {
		return nil, func() {}, err
	}
	return set.Tools(), func() { set.Close() }, nil
}

// mcpSet connects to the configured MCP servers (nil when there are none).
func (c Config) mcpSet(ctx context.Context, logger *slog.Logger) (*mcp.Set, error) {
	if len(c.MCP.Servers) == 0 {
		return nil, nil
	}
	lock, err := mcp.ReadLock(c.MCP.Lock)
	if err != nil {
		return nil, fmt.Errorf("mcp: %w (review with arbiter mcp tools, then write it with arbiter mcp pin)", err)
	}
	return mcp.Connect(ctx, c.MCP, lock, mcp.Options{Logger: logger, Stderr: os.Stderr})
}

var demoScript = []CallConfig{
	{"read_file", `{"path": "notes.txt"`},
	{"read_file", `{"path": "notes.txt"}`},
	{"delete_file", `{"path": "notes.txt"}`},
	{"send_email", `{"to": "ops@example.com", "body": "the deploy is done"}`},
	{"finish", `{"summary": "told ops"}`},
}

func (c Config) tools(sandbox string) ([]driver.Tool, error) {
	cfgs := c.Tools
	if len(cfgs) == 0 {
		for _, n := range toolbox.Names() {
			cfgs = append(cfgs, ToolConfig{Name: n})
		}
	}
	var out []driver.Tool
	for i, tc := range cfgs {
		var timeout time.Duration
		if tc.Timeout != "" {
			d, err := time.ParseDuration(tc.Timeout)
			if err != nil {
				return nil, fmt.Errorf("tools[%d] %s: timeout %q: %w", i, tc.Name, tc.Timeout, err)
			}
			timeout = d
		}
		t, err := toolbox.New(tc.Name, sandbox, tc.Class, timeout)
		if err != nil {
			return nil, fmt.Errorf("tools[%d]: %w", i, err)
		}
		out = append(out, declare(t, tc))
	}
	return out, nil
}

// declared is a tool whose spec also declares what rules files target.
type declared struct {
	driver.Tool
	data, tags []string
	resource   string
}

func (d declared) Spec() driver.Spec {
	s := d.Tool.Spec()
	s.Data, s.Tags, s.Resource = d.data, d.tags, d.resource
	return s
}

// reconciling is declared for a tool with a reconcile hook, which it keeps.
type reconciling struct {
	declared
	driver.Reconciler
}

func declare(t driver.Tool, tc ToolConfig) driver.Tool {
	if len(tc.Data) == 0 && len(tc.Tags) == 0 && tc.Resource == "" {
		return t
	}
	d := declared{Tool: t, data: tc.Data, tags: tc.Tags, resource: tc.Resource}
	if r, ok := t.(driver.Reconciler); ok {
		return reconciling{declared: d, Reconciler: r}
	}
	return d
}

func (c Config) policy() (policy.Policy, error) { return c.policyWith(nil) }

// policyWith is the configured policy, the rules file counting its
// fleet-wide windows in w (nil: such rules fail closed).
func (c Config) policyWith(w rules.Windows) (policy.Policy, error) {
	p := policy.DefaultSideEffects()
	if len(c.Policy.SideEffects) > 0 {
		p = policy.SideEffectPolicy{}
		for class, o := range c.Policy.SideEffects {
			if !events.Outcome(o).Valid() {
				return nil, fmt.Errorf("policy.side_effects.%s: outcome %q (want allow, deny, abort or require_approval)", class, o)
			}
			p[events.SideEffect(class)] = events.Outcome(o)
		}
	}
	id := c.Policy.ID
	if id == "" {
		b, _ := json.Marshal(p)
		id = "side-effects " + string(b)
	}
	base := policy.WithID(p, id)
	if c.Policy.Rules == "" {
		return base, nil
	}
	rp, err := rules.Load(c.Policy.Rules)
	if err != nil {
		return nil, fmt.Errorf("policy.rules: %w", err)
	}
	if w != nil {
		rp = rp.WithWindows(w)
	}
	return policy.Compose(base, rp)
}

// shadow is the candidate policy of policy.shadow, or nil.
func (c Config) shadow() (policy.Policy, error) {
	if c.Policy.Shadow == "" {
		return nil, nil
	}
	p, err := rules.Load(c.Policy.Shadow)
	if err != nil {
		return nil, fmt.Errorf("policy.shadow: %w", err)
	}
	return p, nil
}

func (c Config) operators(extra []string) (approvals.Operators, error) {
	ops := approvals.Operators{}
	for k, name := range c.Operators {
		if err := approvals.ParseOperator(k); err != nil {
			return nil, fmt.Errorf("operators: %w", err)
		}
		ops[k] = name
	}
	for _, k := range extra {
		if err := approvals.ParseOperator(k); err != nil {
			return nil, fmt.Errorf("--operator: %w", err)
		}
		ops[k] = "operator " + k[:8]
	}
	return ops, nil
}

func (c Config) agents() map[string]driver.Agent {
	out := map[string]driver.Agent{"demo": script(demoScript)}
	for name, calls := range c.Agents {
		out[name] = script(calls)
	}
	return out
}

// modelAgents builds the model agents of the file, each offered some of
// tools (the driver's tool names); getenv reads their API keys.
func (c Config) modelAgents(getenv func(string) string, tools []string) (map[string]driver.Agent, error) {
	out := map[string]driver.Agent{}
	for name, f := range c.Models {
		if _, dup := c.Agents[name]; dup || name == "demo" {
			return nil, fmt.Errorf("models.%s: an agent of that name is already in agents", name)
		}
		mc, err := f.Config(getenv, tools)
		if err != nil {
			return nil, fmt.Errorf("models.%s: %w", name, err)
		}
		a, err := model.New(mc)
		if err != nil {
			return nil, fmt.Errorf("models.%s: %w", name, err)
		}
		out[name] = a
	}
	return out, nil
}

func script(calls []CallConfig) driver.Agent {
	a := scripted.Agent{}
	for _, c := range calls {
		a.Decisions = append(a.Decisions, scripted.Call(c.Tool, c.Args))
	}
	return a
}

func (c Config) approvalTTL() (time.Duration, error) {
	if c.ApprovalTTL == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(c.ApprovalTTL)
	if err != nil {
		return 0, fmt.Errorf("approval_ttl %q: %w", c.ApprovalTTL, err)
	}
	return d, nil
}
