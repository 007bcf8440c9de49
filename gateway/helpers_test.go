package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/gateway"
	"github.com/arbiter-run/arbiter/mcp"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

// TestMain doubles as a stdio MCP server with an echo tool when the test
// binary is started as one (the benchmark's upstream).
func TestMain(m *testing.M) {
	if os.Getenv("ARBITER_GATEWAY_TEST_SERVER") != "" {
		srv := sdk.NewServer(&sdk.Implementation{Name: "echo", Version: "1"}, nil)
		srv.AddTool(&sdk.Tool{Name: "echo", Description: "Echo the text.", InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
			Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
			func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				var a struct{ Text string }
				if err := json.Unmarshal(req.Params.Arguments, &a); err != nil {
					return nil, err
				}
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + a.Text}}}, nil
			})
		_ = srv.Run(context.Background(), &sdk.StdioTransport{})
		return
	}
	os.Exit(m.Run())
}

// fsConfig is the official filesystem MCP server (installed by .ci/run)
// over stdio, serving root, with read_text_file read-only and write_file a
// local mutation (its annotations tighten it to destructive); its other
// tools are hidden. Outside CI the test is skipped when the server is not
// installed; in CI its absence fails.
func fsConfig(t testing.TB, root string) mcp.Config {
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
	return mcp.Config{Lock: "unused", Servers: []mcp.ServerConfig{{Name: "fs", Command: "node", Args: []string{script, root}, Tools: map[string]mcp.ToolConfig{
		"read_text_file": {Class: events.ReadOnly},
		"write_file":     {Class: events.LocalMutation},
	}}}}
}

// upstream connects to the filesystem server serving a new directory
// (holding notes.txt), pinned as it lists its tools now.
func upstream(t testing.TB) (root string, tools []driver.Tool) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fsConfig(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := mcp.Connect(ctx, cfg, mcp.Lock{}, mcp.Options{})
	if err != nil {
		t.Fatalf("connect upstream: %v", err)
	}
	lock, err := s.Pins()
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	s, err = mcp.Connect(ctx, cfg, lock, mcp.Options{})
	if err != nil {
		t.Fatalf("connect upstream: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return root, s.Tools()
}

// fleet is one log and an operator, shared by the gateways in front of it.
type fleet struct {
	log *events.Log
	kp  nkeys.KeyPair
	ops approvals.Operators
}

func newFleet(t testing.TB) *fleet {
	t.Helper()
	return newFleetOn(t, testkit.JetStream(t).Log(t, events.Config{}))
}

// newFleetOn is newFleet on log.
func newFleetOn(t testing.TB, log *events.Log) *fleet {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return &fleet{log: log, kp: kp, ops: approvals.Operators{pub: "alice"}}
}

// writesNeedApproval reads freely and asks an operator for every write.
var writesNeedApproval = policy.SideEffectPolicy{
	events.ReadOnly: events.Allow, events.LocalMutation: events.RequireApproval,
	events.RemoteMutation: events.RequireApproval, events.Destructive: events.RequireApproval,
}

func (f *fleet) gateway(t testing.TB, tools []driver.Tool, run string) *gateway.Gateway {
	t.Helper()
	g, err := gateway.New(gateway.Config{
		Gate:  gate.Config{Log: f.log, Policy: writesNeedApproval, Operators: f.ops},
		Tools: tools, Wait: 200 * time.Millisecond, Poll: 20 * time.Millisecond, Run: run,
	})
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	return g
}

// host connects an MCP client (the host) to srv in this process.
// listed is the names of the tools cs is offered, sorted.
func listed(t testing.TB, cs *sdk.ClientSession) []string {
	t.Helper()
	lt, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

func host(t testing.TB, srv *sdk.Server) *sdk.ClientSession {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := srv.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatalf("server connect: %v", err)
	}
	t.Cleanup(func() { ss.Close() })
	c := sdk.NewClient(&sdk.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// callTool calls name with args and returns the result's text.
func callTool(t testing.TB, cs *sdk.ClientSession, name string, args any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// status is the status tool's answer.
func status(t testing.TB, cs *sdk.ClientSession) gateway.Status {
	t.Helper()
	out, isErr := callTool(t, cs, gateway.StatusTool, map[string]any{})
	var st gateway.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil || isErr {
		t.Fatalf("status: %q (error %v): %v", out, isErr, err)
	}
	return st
}

// grant signs and publishes a grant of the approval st says waits.
func (f *fleet) decide(t testing.TB, st gateway.Status, decision string) {
	t.Helper()
	if len(st.Waiting) != 1 {
		t.Fatalf("status: %+v, want one call waiting", st)
	}
	recs, _, err := f.log.Read(t.Context(), st.Run)
	if err != nil {
		t.Fatal(err)
	}
	var hash string
	for _, r := range recs {
		if r.Event.Kind == events.ApprovalRequested {
			var b events.PolicyBody
			if err := json.Unmarshal(r.Event.Body, &b); err != nil {
				t.Fatal(err)
			}
			if b.Approval.ID == st.Waiting[0].Approval {
				hash = b.Approval.Hash
			}
		}
	}
	d, err := approvals.Sign(f.kp, st.Run, st.Waiting[0].Approval, hash, decision, "checked", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := approvals.Publish(t.Context(), f.log, st.Run, d); err != nil {
		t.Fatal(err)
	}
}

func kindCount(t testing.TB, log *events.Log, run string, k events.Kind) int {
	t.Helper()
	recs, _, err := log.Read(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Event.Kind == k {
			n++
		}
	}
	return n
}
