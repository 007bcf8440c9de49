package mcp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/mcp"
)

// TestMain doubles as a stdio MCP server when the test binary is started as
// one (see stdioServer).
func TestMain(m *testing.M) {
	if os.Getenv("ARBITER_MCP_TEST_SERVER") != "" {
		serveStdio()
		return
	}
	os.Exit(m.Run())
}

const objSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`

// echoTool answers with its text at once.
func echoTool(srv *sdk.Server, name, description string, ann *sdk.ToolAnnotations) {
	srv.AddTool(&sdk.Tool{Name: name, Description: description, InputSchema: json.RawMessage(objSchema), Annotations: ann},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var a struct{ Text string }
			if err := json.Unmarshal(req.Params.Arguments, &a); err != nil {
				return nil, err
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + a.Text}}}, nil
		})
}

// serveStdio runs a go-sdk server over stdin/stdout with an echo tool and a
// "hang" tool that writes the server's pid to $ARBITER_MCP_PID_FILE and
// then answers only when its call is cancelled.
func serveStdio() {
	srv := sdk.NewServer(&sdk.Implementation{Name: "stdio-test", Version: "1"}, nil)
	echoTool(srv, "echo", "Echo the text.", &sdk.ToolAnnotations{ReadOnlyHint: true})
	srv.AddTool(&sdk.Tool{Name: "hang", Description: "Write, slowly.", InputSchema: json.RawMessage(objSchema)},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			if f := os.Getenv("ARBITER_MCP_PID_FILE"); f != "" {
				os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o600)
			}
			<-ctx.Done()
			return nil, ctx.Err()
		})
	srv.Run(context.Background(), &sdk.StdioTransport{})
}

// stdioServer is the config of a stdio server that is this test binary.
func stdioServer(t *testing.T, name string, env map[string]string) mcp.ServerConfig {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := map[string]string{"ARBITER_MCP_TEST_SERVER": "1"}
	for k, v := range env {
		e[k] = v
	}
	return mcp.ServerConfig{Name: name, Command: exe, Env: e}
}

// httpServer serves srv over streamable HTTP on 127.0.0.1 until the test
// ends. check, when set, sees every request first and may refuse it.
func httpServer(t testing.TB, srv *sdk.Server, check func(*http.Request) bool) string {
	t.Helper()
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if check != nil && !check(r) {
			http.Error(w, "refused", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL
}

func newServer() *sdk.Server {
	return sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
}

// connect connects a set and closes it when the test ends.
func connect(t *testing.T, cfg mcp.Config, lock mcp.Lock, opts mcp.Options) *mcp.Set {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := mcp.Connect(ctx, cfg, lock, opts)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pin connects once and returns the lock that pins what the servers list.
func pin(t *testing.T, cfg mcp.Config) mcp.Lock {
	t.Helper()
	s := connect(t, cfg, mcp.Lock{}, mcp.Options{})
	l, err := s.Pins()
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return l
}

// tool returns the offered tool called name.
func tool(t *testing.T, s *mcp.Set, name string) *mcp.Tool {
	t.Helper()
	for _, tl := range s.Tools() {
		if tl.Spec().Name == name {
			return tl.(*mcp.Tool)
		}
	}
	var names []string
	for _, tl := range s.Tools() {
		names = append(names, tl.Spec().Name)
	}
	t.Fatalf("no tool %s offered (offered: %v)", name, names)
	return nil
}

// review returns the review of server's tool.
func review(t *testing.T, s *mcp.Set, server, name string) mcp.Review {
	t.Helper()
	for _, r := range s.Reviews() {
		if r.Server == server && r.Tool == name {
			return r
		}
	}
	t.Fatalf("no review of %s/%s in %+v", server, name, s.Reviews())
	return mcp.Review{}
}

// recorder collects reported reviews.
type recorder struct {
	mu  sync.Mutex
	got []mcp.Review
}

func (r *recorder) add(rv mcp.Review) {
	r.mu.Lock()
	r.got = append(r.got, rv)
	r.mu.Unlock()
}

// waitFor returns the first reported review that match accepts, waiting up
// to 10s.
func (r *recorder) waitFor(t *testing.T, match func(mcp.Review) bool) mcp.Review {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		for _, rv := range r.got {
			if match(rv) {
				r.mu.Unlock()
				return rv
			}
		}
		r.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Fatalf("no matching review reported; got %+v", r.got)
	return mcp.Review{}
}

func call(t *testing.T, tl *mcp.Tool, args string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), tl.Spec().Timeout)
	defer cancel()
	return tl.Execute(ctx, json.RawMessage(args))
}

func httpServerB(b *testing.B, srv *sdk.Server) string { return httpServer(b, srv, nil) }
