package rules

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/arbiter-run/arbiter/events"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// Schema is the JSON Schema of a rules file (published as
// docs/rules.schema.json, held equal to this by a test).
//
//go:embed schema.json
var Schema []byte

// Sentinels a [*LoadError] wraps, for what callers branch on.
var (
	// ErrSyntax: the file is not one YAML or JSON document.
	ErrSyntax = errors.New("not a rules document")
	// ErrSchema: the document does not satisfy the rules file's schema.
	ErrSchema = errors.New("does not satisfy the rules schema")
	// ErrCondition: a condition does not compile, is not boolean, or may
	// cost more than the limit.
	ErrCondition = errors.New("unusable condition")
	// ErrInvalid: the document is well formed but means nothing usable
	// (repeated ids, a pattern that cannot match, a setting not supported).
	ErrInvalid = errors.New("invalid rules")
)

// LoadError says where a rules file is wrong and what is wrong there.
type LoadError struct {
	File      string
	Line, Col int
	// Pointer is the JSON pointer of the value at fault ("" for the document).
	Pointer string
	Reason  string
	Err     error
}

func (e *LoadError) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Reason)
}

func (e *LoadError) Unwrap() error { return e.Err }

// Defaults: what a request no rule decides falls through to.
const (
	DefaultSideEffects = "side_effects" // the default side-effect mapping (fails closed)
	DefaultDeny        = "deny"
	DefaultAllow       = "allow" // accepted only when written, and linted
)

// Enforcement modes.
const (
	ModeBlock   = "block"
	ModeWarn    = "warn"
	ModeAudit   = "audit"
	ModeConfirm = "confirm"
)

// Phases.
const (
	PhaseDiscovery  = "discovery"
	PhaseInvocation = "invocation"
)

// Target types.
const (
	TargetTool      = "tool"
	TargetData      = "data"
	TargetOperation = "operation"
	TargetResource  = "resource"
)

// File is a rules file as written.
type File struct {
	Version  int          `json:"version"`
	Default  string       `json:"default,omitempty"`
	Policies []PolicySpec `json:"policies"`
}

// PolicySpec is one policy of a file.
type PolicySpec struct {
	ID          string      `json:"id"`
	Name        string      `json:"name,omitempty"`
	Description string      `json:"description,omitempty"`
	Type        string      `json:"type"`
	Rules       []RuleSpec  `json:"rules"`
	Enforcement Enforcement `json:"enforcement"`
	// Enabled: absent means enabled.
	Enabled  *bool    `json:"enabled,omitempty"`
	Priority int      `json:"priority,omitempty"`
	Scope    Scope    `json:"scope"`
	Phases   []string `json:"phases,omitempty"`
}

// On reports whether the policy is enabled (absent means enabled).
func (p PolicySpec) On() bool { return p.Enabled == nil || *p.Enabled }

// HasPhase reports whether the policy runs in phase (no phases: invocation).
func (p PolicySpec) HasPhase(phase string) bool {
	if len(p.Phases) == 0 {
		return phase == PhaseInvocation
	}
	for _, ph := range p.Phases {
		if ph == phase {
			return true
		}
	}
	return false
}

// Scope narrows which tools a policy applies to. Empty lists apply to all.
type Scope struct {
	Tools       []string `json:"tools,omitempty"`
	SideEffects []string `json:"side_effects,omitempty"`
}

// RuleSpec is one rule.
type RuleSpec struct {
	ID        string `json:"id"`
	Action    string `json:"action"`
	Target    Target `json:"target"`
	Condition string `json:"condition,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Code      string `json:"code,omitempty"`
}

// Target is what a rule matches: a glob pattern over the tool name, its data
// categories, its operation (side-effect class and tags) or its resource.
type Target struct {
	Type       string         `json:"type"`
	Pattern    string         `json:"pattern"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// Enforcement is what a policy does when one of its rules applies.
type Enforcement struct {
	Mode       string `json:"mode"`
	Message    string `json:"message,omitempty"`
	Escalation string `json:"escalation,omitempty"`
	// Abort: a block ends the run (abort) instead of refusing the call.
	Abort bool `json:"abort,omitempty"`
	// ApprovalKind names the approval a confirm asks for (default: the
	// policy's id).
	ApprovalKind string `json:"approval_kind,omitempty"`
}

var compiledSchema = func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema))
	if err != nil {
		panic(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("arbiter:rules.schema.json", doc); err != nil {
		panic(err)
	}
	return c.MustCompile("arbiter:rules.schema.json")
}()

// MaxFileSize bounds a rules file.
const MaxFileSize = 4 << 20

// Load reads and compiles the rules file at path. Errors are a
// [*LoadError] naming path:line:column.
func Load(path string) (*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load rules %s: %w", path, err)
	}
	return Parse(path, b)
}

// parse decodes and validates data, returning the file and where each of
// its values is.
func parse(name string, data []byte) (*File, positions, error) {
	fail := func(ps positions, ptr string, sentinel error, format string, a ...any) error {
		p := ps.at(ptr)
		return &LoadError{File: name, Line: p.line, Col: p.col, Pointer: ptr, Reason: fmt.Sprintf(format, a...), Err: sentinel}
	}
	ps := positions{}
	if len(data) > MaxFileSize {
		return nil, nil, fail(ps, "", ErrSyntax, "%d bytes (at most %d)", len(data), MaxFileSize)
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		return nil, nil, yamlError(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, nil, &LoadError{File: name, Line: extra.Line, Col: extra.Column, Reason: "a second document (want one)", Err: ErrSyntax}
	}
	v, err := generic(&root, "", ps)
	if err != nil {
		le := &LoadError{File: name, Line: 1, Col: 1, Reason: err.Error(), Err: ErrSyntax}
		var pe *posError
		if errors.As(err, &pe) {
			le.Line, le.Col, le.Reason = pe.at.line, pe.at.col, pe.reason
		}
		return nil, nil, le
	}
	if err := compiledSchema.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, nil, fail(ps, "", ErrSchema, "%v", err)
		}
		leaf := ve
		for len(leaf.Causes) > 0 {
			leaf = leaf.Causes[0]
		}
		ptr := ""
		if len(leaf.InstanceLocation) > 0 {
			parts := make([]string, len(leaf.InstanceLocation))
			for i, s := range leaf.InstanceLocation {
				parts[i] = escapePointer(s)
			}
			ptr = "/" + strings.Join(parts, "/")
		}
		where := ptr
		if where == "" {
			where = "the document"
		}
		return nil, nil, fail(ps, ptr, ErrSchema, "%s: %s", where, leaf.ErrorKind.LocalizedString(printer))
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, nil, fail(ps, "", ErrSyntax, "%v", err)
	}
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fail(ps, "", ErrSchema, "%v", err)
	}
	return &f, ps, nil
}

// yamlError turns the YAML decoder's error (which carries "line N:") into a
// LoadError.
func yamlError(name string, err error) error {
	line := 1
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "yaml: ")
	var n int
	if _, e := fmt.Sscanf(msg, "line %d:", &n); e == nil {
		line = n
		if i := strings.IndexByte(msg, ':'); i >= 0 {
			msg = strings.TrimSpace(msg[i+1:])
		}
	}
	return &LoadError{File: name, Line: line, Col: 1, Reason: msg, Err: ErrSyntax}
}

var sideEffectClasses = func() []string {
	var cs []string
	for _, c := range events.SideEffects {
		cs = append(cs, string(c))
	}
	return cs
}()
