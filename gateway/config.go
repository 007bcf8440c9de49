package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/limitsconf"
	"github.com/arbiter-run/arbiter/mcp"
	"github.com/arbiter-run/arbiter/policy"
)

// File is the gateway's configuration file (YAML): the upstream servers,
// the policy and the operators, as a worker's file names them, and the
// gateway's own settings.
type File struct {
	// MCP: the upstream servers and their lock file (see package mcp). A
	// relative lock path is relative to the file.
	MCP mcp.Config `yaml:"mcp"`
	// Policy: the side-effect mapping and its id; default the built-in
	// mapping (read_only and local_mutation allowed, remote_mutation
	// needs an approval, destructive denied).
	Policy struct {
		ID          string            `yaml:"id"`
		SideEffects map[string]string `yaml:"side_effects"`
	} `yaml:"policy"`
	// Operators: public nkeys (U…) whose signed decisions are accepted,
	// with a name each.
	Operators map[string]string `yaml:"operators"`
	// ApprovalTTL: how long an approval waits ("24h"); empty: no expiry.
	ApprovalTTL string `yaml:"approval_ttl"`
	// Wait: how long a call that needs an approval waits for it before
	// answering that it waits ("10s", the default).
	Wait string `yaml:"wait"`
	// Actor: recorded as the agent of each session's run ("gateway").
	Actor string `yaml:"actor"`
	// Limits: of each session's run, recorded when it is made (a run
	// carried on with --run keeps those it was made with). Left out:
	// driver.DefaultLimits, 100 calls, 5 failed calls in a row and 5
	// identical calls in a row; -1 (max_elapsed: none) for no limit. A
	// run that reaches one ends, and a session carried on with --run needs
	// another run id then.
	Limits limitsconf.Config `yaml:"limits"`
}

// LoadFile reads and checks the gateway file at path. Errors name the
// file and, for YAML, the line; a field that is not one of File's is
// refused.
func LoadFile(path string) (File, error) {
	var f File
	b, err := os.ReadFile(path)
	if err != nil {
		return f, fmt.Errorf("load gateway config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	if len(f.MCP.Servers) == 0 {
		return f, fmt.Errorf("%w: %s: mcp.servers: no upstream server", ErrConfig, path)
	}
	if f.MCP.Lock != "" && !filepath.IsAbs(f.MCP.Lock) {
		f.MCP.Lock = filepath.Join(filepath.Dir(path), f.MCP.Lock)
	}
	if err := f.MCP.Validate(); err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	for _, d := range []struct{ name, v string }{{"approval_ttl", f.ApprovalTTL}, {"wait", f.Wait}} {
		if _, err := duration(d.v); err != nil {
			return f, fmt.Errorf("%w: %s: %s: %v", ErrConfig, path, d.name, err)
		}
	}
	if _, err := f.PolicyOf(); err != nil {
		return f, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	if _, err := f.OperatorsOf(); err != nil {
		return f, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	if _, err := f.Limits.Limits(); err != nil {
		return f, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	return f, nil
}

func duration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (like \"10s\" or \"24h\")", s)
	}
	return d, nil
}

// PolicyOf is the file's policy, with its id (by default one that names
// the mapping, so replay tells two mappings apart).
func (f File) PolicyOf() (policy.Policy, error) {
	p := policy.DefaultSideEffects()
	if len(f.Policy.SideEffects) > 0 {
		p = policy.SideEffectPolicy{}
		for class, o := range f.Policy.SideEffects {
			if !events.Outcome(o).Valid() {
				return nil, fmt.Errorf("policy.side_effects.%s: outcome %q (want allow, deny, abort or require_approval)", class, o)
			}
			p[events.SideEffect(class)] = events.Outcome(o)
		}
	}
	id := f.Policy.ID
	if id == "" {
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		id = "side-effects " + string(b)
	}
	return policy.WithID(p, id), nil
}

// OperatorsOf is the file's operators, each key checked.
func (f File) OperatorsOf() (approvals.Operators, error) {
	ops := approvals.Operators{}
	for k, name := range f.Operators {
		if err := approvals.ParseOperator(k); err != nil {
			return nil, fmt.Errorf("operators: %w", err)
		}
		ops[k] = name
	}
	return ops, nil
}

// Durations returns the file's approval TTL and wait (checked by
// [LoadFile]).
func (f File) Durations() (ttl, wait time.Duration) {
	ttl, _ = duration(f.ApprovalTTL)
	wait, _ = duration(f.Wait)
	return ttl, wait
}
