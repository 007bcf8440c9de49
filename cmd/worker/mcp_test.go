package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/mcp"
)

func TestConfig_MCPSection(t *testing.T) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "read", Description: "Read.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	p := writeConfig(t, "mcp:\n  lock: mcp.lock\n  servers:\n    - name: web\n      url: "+hs.URL+"\n      tools:\n        read: {class: read_only}\n")
	c, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(p), "mcp.lock"); c.MCP.Lock != want {
		t.Errorf("lock path: got %s, want %s (beside the config)", c.MCP.Lock, want)
	}
	logger := slog.New(slog.DiscardHandler)
	if _, _, err := c.mcpTools(t.Context(), logger); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("without a lock file: got %v, want ErrNotExist", err)
	}
	if _, err := mcp.PinAll(t.Context(), c.MCP, mcp.Options{}); err != nil {
		t.Fatal(err)
	}
	tools, closeMCP, err := c.mcpTools(t.Context(), logger)
	if err != nil {
		t.Fatal(err)
	}
	defer closeMCP()
	if len(tools) != 1 || tools[0].Spec().Name != "web__read" || tools[0].Spec().SideEffect != events.ReadOnly {
		t.Errorf("tools: got %d, want web__read as read_only", len(tools))
	}

	bad := writeConfig(t, "mcp:\n  servers:\n    - name: web\n      url: "+hs.URL+"\n")
	if _, err := loadConfig(bad); !errors.Is(err, mcp.ErrConfig) {
		t.Errorf("an mcp section with no lock: got %v, want ErrConfig", err)
	}
}

// The example config loads, and its committed lock pins the filesystem
// server .ci/run installs: reads and the write are offered, nothing else.
func TestConfig_MCPFilesystemExample(t *testing.T) {
	c, err := loadConfig("../../docs/examples/mcp-filesystem/worker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := c.tools(t.TempDir())
	if err != nil || len(tools) != 1 || tools[0].Spec().Name != "finish" {
		t.Fatalf("built-in tools: got %d, %v; want finish alone", len(tools), err)
	}
	if _, err := c.policy(); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("../../" + c.MCP.Servers[0].Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the filesystem MCP server is not installed: %v", err)
		}
		t.Skip("the filesystem MCP server is not installed: run npm ci --prefix .ci (as .ci/run does)")
	}
	c.MCP.Servers[0].Args = []string{script, t.TempDir()}
	mcpTools, closeMCP, err := c.mcpTools(t.Context(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeMCP()
	got := map[string]events.SideEffect{}
	for _, tl := range mcpTools {
		got[tl.Spec().Name] = tl.Spec().SideEffect
	}
	want := map[string]events.SideEffect{"fs__read_text_file": events.ReadOnly, "fs__list_directory": events.ReadOnly, "fs__write_file": events.Destructive}
	if len(got) != len(want) {
		t.Errorf("offered: got %v, want %v", got, want)
	}
	for name, class := range want {
		if got[name] != class {
			t.Errorf("%s: got class %q, want %s (is the lock stale? arbiter mcp pin rewrites it)", name, got[name], class)
		}
	}
}
