package mcp_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/mcp"
)

func TestConfig_ValidateRefuses(t *testing.T) {
	ok := mcp.ServerConfig{Name: "fs", Command: "node", Class: events.ReadOnly}
	for _, tc := range []struct {
		name string
		edit func(*mcp.Config)
		want string
	}{
		{"no lock", func(c *mcp.Config) { c.Lock = "" }, "mcp.lock"},
		{"bad name", func(c *mcp.Config) { c.Servers[0].Name = "File_System" }, `name "File_System"`},
		{"both transports", func(c *mcp.Config) { c.Servers[0].URL = "http://127.0.0.1:1" }, "exactly one of command"},
		{"neither transport", func(c *mcp.Config) { c.Servers[0].Command = "" }, "exactly one of command"},
		{"url scheme", func(c *mcp.Config) {
			c.Servers[0] = mcp.ServerConfig{Name: "w", URL: "ftp://x", Class: events.ReadOnly}
		}, `url "ftp://x"`},
		{"headers on a command", func(c *mcp.Config) { c.Servers[0].Headers = map[string]string{"a": "b"} }, "headers and bearer_token_env"},
		{"unknown class", func(c *mcp.Config) { c.Servers[0].Class = "remote" }, `unknown side-effect class "remote"`},
		{"tool class", func(c *mcp.Config) { c.Servers[0].Tools = map[string]mcp.ToolConfig{"w": {Class: "writes"}} }, `tools.w.class: unknown side-effect class "writes"`},
		{"no class at all", func(c *mcp.Config) {
			c.Servers[0].Class = ""
			c.Servers[0].Tools = map[string]mcp.ToolConfig{"w": {}}
		}, "tools.w: no class"},
		{"unlisted", func(c *mcp.Config) { c.Servers[0].Unlisted = "allow" }, `unlisted "allow"`},
		{"timeout", func(c *mcp.Config) { c.Servers[0].Timeout = "soon" }, `timeout "soon"`},
		{"tool timeout", func(c *mcp.Config) { c.Servers[0].Tools = map[string]mcp.ToolConfig{"w": {Timeout: "-1s"}} }, `tools.w.timeout "-1s"`},
		{"duplicate", func(c *mcp.Config) { c.Servers = append(c.Servers, c.Servers[0]) }, `name "fs" used twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mcp.Config{Lock: "mcp.lock", Servers: []mcp.ServerConfig{ok}}
			tc.edit(&c)
			err := c.Validate()
			if !errors.Is(err, mcp.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrConfig saying %q", err, tc.want)
			}
		})
	}
	if err := (mcp.Config{Lock: "mcp.lock", Servers: []mcp.ServerConfig{ok}}).Validate(); err != nil {
		t.Errorf("a good config: %v", err)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "worker.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write(`sandbox: /tmp/x
mcp:
  lock: mcp.lock
  servers:
    - name: fs
      command: node
      tools:
        read_text_file: {class: read_only}
        write_file:
          class: destructive
          fixed: {mode: "0644"}
`)
	c, err := mcp.LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lock != filepath.Join(dir, "mcp.lock") || c.Servers[0].Tools["write_file"].Fixed["mode"] != "0644" {
		t.Errorf("loaded %+v", c)
	}

	p = write("mcp:\n  lock: mcp.lock\n  servers:\n    - name: fs\n      comand: node\n")
	if _, err := mcp.LoadConfig(p); err == nil || !strings.Contains(err.Error(), "line 5") || !strings.Contains(err.Error(), "comand") {
		t.Errorf("a misspelt key: got %v, want the file's line 5 named", err)
	}
	p = write("sandbox: x\n")
	if _, err := mcp.LoadConfig(p); !errors.Is(err, mcp.ErrConfig) {
		t.Errorf("no mcp section: got %v, want ErrConfig", err)
	}
	p = write("mcp:\n  lock: l\n  servers:\n    - name: fs\n      command: node\n      class: sometimes\n")
	if _, err := mcp.LoadConfig(p); !errors.Is(err, mcp.ErrConfig) || !strings.Contains(err.Error(), p) {
		t.Errorf("an invalid section: got %v, want ErrConfig naming the file", err)
	}
}

func TestLock_RoundTripAndRefusals(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mcp.lock")
	if _, err := mcp.ReadLock(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing lock: got %v, want ErrNotExist", err)
	}
	l := mcp.Lock{Servers: map[string]map[string]mcp.Pin{"fs": {"read": {Hash: strings.Repeat("a", 64), Description: "Read."}}}}
	if err := mcp.WriteLock(path, l); err != nil {
		t.Fatal(err)
	}
	got, err := mcp.ReadLock(path)
	if err != nil || got.Version != mcp.LockVersion || got.Servers["fs"]["read"].Description != "Read." {
		t.Errorf("read back: got %+v, %v", got, err)
	}
	for name, body := range map[string]string{
		"version":     `{"version":2,"servers":{}}`,
		"unknown key": `{"version":1,"servers":{},"extra":1}`,
		"short hash":  `{"version":1,"servers":{"fs":{"read":{"hash":"abc"}}}}`,
		"not json":    `{"version":`,
	} {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := mcp.ReadLock(path); !errors.Is(err, mcp.ErrLock) {
			t.Errorf("%s: got %v, want ErrLock", name, err)
		}
	}
}
