package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/mcp"
)

// A server offers two tools; the operator classified one and pinned both.
// Only the classified one is offered, under the server's prefix, and the
// review says why the other is not.
func ExampleConnect() {
	srv := sdk.NewServer(&sdk.Implementation{Name: "notes", Version: "1"}, nil)
	for _, name := range []string{"read_note", "delete_note"} {
		srv.AddTool(&sdk.Tool{Name: name, Description: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "ok"}}}, nil
			})
	}
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	defer hs.Close()
	defer hs.CloseClientConnections()

	dir, _ := os.MkdirTemp("", "mcp-example")
	defer os.RemoveAll(dir)
	cfg := mcp.Config{Lock: dir + "/mcp.lock", Servers: []mcp.ServerConfig{{
		Name: "notes", URL: hs.URL,
		Tools: map[string]mcp.ToolConfig{"read_note": {Class: "read_only"}},
	}}}
	ctx := context.Background()
	if _, err := mcp.PinAll(ctx, cfg, mcp.Options{}); err != nil { // what "arbiter mcp pin" does
		fmt.Println(err)
		return
	}
	lock, _ := mcp.ReadLock(cfg.Lock)
	set, err := mcp.Connect(ctx, cfg, lock, mcp.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Close()
	for _, t := range set.Tools() {
		fmt.Println("offered:", t.Spec().Name, t.Spec().SideEffect)
	}
	for _, r := range set.Reviews() {
		fmt.Println("review:", r.Name, r.Status, r.Offered, r.Note)
	}
	// Output:
	// offered: notes__read_note read_only
	// review: notes__delete_note pinned false not listed in the config
	// review: notes__read_note pinned true
}
