package mcp

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"go.yaml.in/yaml/v3"
)

// Config is the mcp section of a worker's configuration.
type Config struct {
	// Servers to connect, each under a unique name.
	Servers []ServerConfig `yaml:"servers"`
	// Lock is the path of the lock file that pins the servers' tools
	// (written by "arbiter mcp pin"). Required when Servers is not empty;
	// [LoadConfig] makes a relative path relative to the config file.
	Lock string `yaml:"lock"`
}

// ServerConfig is one MCP server. Exactly one of Command and URL is set.
type ServerConfig struct {
	// Name prefixes the server's tools ("<name>__<tool>"): lower-case
	// letters, digits and '-', at most 32, so two servers' tools never
	// collide.
	Name string `yaml:"name"`
	// Command, Args and Env start a stdio server. The process gets PATH and
	// HOME from the worker's environment and Env, nothing else.
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	// URL is a streamable HTTP server's endpoint, with Headers sent on every
	// request and, when BearerTokenEnv is set, "Authorization: Bearer" with
	// the value of that environment variable (which must be set).
	URL            string            `yaml:"url"`
	Headers        map[string]string `yaml:"headers"`
	BearerTokenEnv string            `yaml:"bearer_token_env"`
	// Class is the side-effect class of a listed tool that names none.
	// Empty: every listed tool must name its class.
	Class events.SideEffect `yaml:"class"`
	// Unlisted says what becomes of a tool the server offers that Tools does
	// not list: "hide" (the default: not offered) or "strictest" (offered
	// as destructive).
	Unlisted string `yaml:"unlisted"`
	// Timeout bounds a call when its tool sets none. Default 30s.
	Timeout string `yaml:"timeout"`
	// Tools the operator classified, by the server's name for them.
	Tools map[string]ToolConfig `yaml:"tools"`
}

// ToolConfig is the operator's word on one tool.
type ToolConfig struct {
	// Class is its side-effect class (read_only, local_mutation,
	// remote_mutation, destructive); empty takes the server's Class.
	Class events.SideEffect `yaml:"class"`
	// Timeout bounds one call ("10s"); empty takes the server's.
	Timeout string `yaml:"timeout"`
	// Fixed arguments: set by the runtime on every call, hidden from the
	// model's schema. Each must be a property of the tool's input schema.
	Fixed map[string]any `yaml:"fixed"`
}

// Unlisted tool policies.
const (
	UnlistedHide      = "hide"
	UnlistedStrictest = "strictest"
)

// DefaultTimeout bounds a call when the config sets no timeout.
const DefaultTimeout = 30 * time.Second

// ErrConfig marks a configuration the package refuses.
var ErrConfig = errors.New("mcp config")

var serverName = regexp.MustCompile(`^[a-z0-9-]{1,32}$`)

// Validate checks c. Errors wrap [ErrConfig] and name the server, the tool
// and the field at fault.
func (c Config) Validate() error {
	if len(c.Servers) > 0 && c.Lock == "" {
		return fmt.Errorf("%w: mcp.lock: no lock file named (run \"arbiter mcp pin\" to write one)", ErrConfig)
	}
	seen := map[string]bool{}
	for i, s := range c.Servers {
		at := fmt.Sprintf("mcp.servers[%d]", i)
		if s.Name != "" {
			at += " (" + s.Name + ")"
		}
		if err := s.validate(); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrConfig, at, err)
		}
		if seen[s.Name] {
			return fmt.Errorf("%w: %s: name %q used twice", ErrConfig, at, s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

func (s ServerConfig) validate() error {
	switch {
	case !serverName.MatchString(s.Name):
		return fmt.Errorf("name %q (want 1 to 32 of a-z, 0-9 and '-')", s.Name)
	case (s.Command == "") == (s.URL == ""):
		return errors.New("set exactly one of command (a stdio server) and url (a streamable HTTP server)")
	case s.Command != "" && (len(s.Headers) > 0 || s.BearerTokenEnv != ""):
		return errors.New("headers and bearer_token_env are for a url server, not a command")
	case s.URL != "" && (len(s.Args) > 0 || len(s.Env) > 0):
		return errors.New("args and env are for a command server, not a url")
	case s.URL != "" && !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://"):
		return fmt.Errorf("url %q (want http:// or https://)", s.URL)
	case s.Class != "" && classRank(s.Class) < 0:
		return badClass("class", s.Class)
	case s.Unlisted != "" && s.Unlisted != UnlistedHide && s.Unlisted != UnlistedStrictest:
		return fmt.Errorf("unlisted %q (want hide or strictest)", s.Unlisted)
	}
	if _, err := s.timeout(""); err != nil {
		return err
	}
	for _, name := range sortedKeys(s.Tools) {
		t := s.Tools[name]
		switch {
		case t.Class == "" && s.Class == "":
			return fmt.Errorf("tools.%s: no class, and the server has no default class", name)
		case t.Class != "" && classRank(t.Class) < 0:
			return badClass("tools."+name+".class", t.Class)
		}
		if _, err := s.timeout(name); err != nil {
			return err
		}
		if _, err := t.fixedJSON(); err != nil {
			return fmt.Errorf("tools.%s.fixed: %v", name, err)
		}
	}
	return nil
}

func badClass(field string, class events.SideEffect) error {
	return fmt.Errorf("%s: unknown side-effect class %q (want one of %s, %s, %s, %s)", field, class,
		events.ReadOnly, events.LocalMutation, events.RemoteMutation, events.Destructive)
}

// timeout is the call timeout of tool (the server's when tool is "" or
// sets none).
func (s ServerConfig) timeout(tool string) (time.Duration, error) {
	field, v := "timeout", s.Timeout
	if t, ok := s.Tools[tool]; ok && t.Timeout != "" {
		field, v = "tools."+tool+".timeout", t.Timeout
	}
	if v == "" {
		return DefaultTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s %q (want a positive duration such as 30s)", field, v)
	}
	return d, nil
}

// fixedJSON is t's fixed arguments as one JSON object, nil for none.
func (t ToolConfig) fixedJSON() ([]byte, error) {
	if len(t.Fixed) == 0 {
		return nil, nil
	}
	return marshalConfigValue(t.Fixed)
}

// LoadConfig reads the mcp section of the YAML file at path (other
// top-level keys are left to their owners) and validates it. Unknown keys
// inside the section are refused, with the file and line.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load mcp config: %w", err)
	}
	// Other top-level keys fall into Rest; inside the section, unknown
	// keys are refused with their line.
	var file struct {
		MCP  *Config              `yaml:"mcp"`
		Rest map[string]yaml.Node `yaml:",inline"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	if file.MCP == nil {
		return Config{}, fmt.Errorf("%w: %s: no mcp section", ErrConfig, path)
	}
	c := *file.MCP
	if c.Lock != "" && !filepath.IsAbs(c.Lock) {
		c.Lock = filepath.Join(filepath.Dir(path), c.Lock)
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
