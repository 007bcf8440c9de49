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

// filesystemServer is the config of the official filesystem MCP server
// (installed by .ci/run) over stdio, serving root. Outside CI the test is
// skipped when the package is not installed; in CI its absence fails.
func filesystemServer(t *testing.T, root string) mcp.ServerConfig {
	t.Helper()
	script, err := filepath.Abs("../.ci/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		msg := "the filesystem MCP server is not installed: run npm ci --prefix .ci (as .ci/run does)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + ": " + err.Error())
		}
		t.Skip(msg)
	}
	return mcp.ServerConfig{Name: "fs", Command: "node", Args: []string{script, root}, Tools: map[string]mcp.ToolConfig{
		"read_text_file": {Class: events.ReadOnly},
		"write_file":     {Class: events.LocalMutation},
	}}
}

func TestFilesystemServer_ReadAndWrite(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := mcp.Config{Lock: "unused", Servers: []mcp.ServerConfig{filesystemServer(t, root)}}
	var rec recorder
	s := connect(t, cfg, pin(t, cfg), mcp.Options{OnChange: rec.add})

	var names []string
	for _, tl := range s.Tools() {
		names = append(names, tl.Spec().Name)
	}
	if strings.Join(names, ",") != "fs__read_text_file,fs__write_file" {
		t.Errorf("offered: got %v, want the two the operator listed", names)
	}
	read, write := tool(t, s, "fs__read_text_file"), tool(t, s, "fs__write_file")
	// The server says write_file is destructive: the operator's
	// local_mutation is tightened, and that is reported.
	if got := write.Spec().SideEffect; got != events.Destructive {
		t.Errorf("write_file class: got %s, want destructive (from its annotations)", got)
	}
	if r := rec.waitFor(t, func(r mcp.Review) bool { return r.Tool == "write_file" }); r.Hint != "annotations tighten local_mutation to destructive" {
		t.Errorf("write_file reported hint: got %q", r.Hint)
	}
	if got := read.Spec().SideEffect; got != events.ReadOnly {
		t.Errorf("read_text_file class: got %s, want read_only", got)
	}

	out, err := call(t, read, `{"path":"`+filepath.Join(root, "notes.txt")+`"}`)
	if err != nil || out != "hello" {
		t.Errorf("read: got %q, %v; want hello", out, err)
	}
	target := filepath.Join(root, "out.txt")
	if _, err := call(t, write, `{"path":"`+target+`","content":"written"}`); err != nil {
		t.Fatalf("write: %v", err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "written" {
		t.Errorf("file after the write: got %q, %v", b, err)
	}
	_, err = call(t, read, `{"path":"/etc/hostname"}`)
	var re *mcp.ResultError
	if !errors.As(err, &re) {
		t.Errorf("read outside the root: got %v, want the server's error result", err)
	}
	for _, r := range s.Reviews() {
		if r.Status != mcp.Pinned {
			t.Errorf("%s: status %s, want pinned", r.Tool, r.Status)
		}
	}
}
