package mcp_test

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/mcp"
)

// serveOn serves srv over streamable HTTP on addr until stop is called.
func serveOn(t *testing.T, addr string, srv *sdk.Server) (string, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil)}
	go hs.Serve(ln)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			hs.Close()
		}
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// An HTTP server that goes away: the call that finds it gone is
// interrupted (whether it was received cannot be told), the next fail
// unsent while it is away, and once it is back the session is made again.
func TestTool_HTTPServerGoneAndBack(t *testing.T) {
	srv := newServer()
	echoTool(srv, "echo", "Echo the text.", &sdk.ToolAnnotations{ReadOnlyHint: true})
	addr, stop := serveOn(t, "127.0.0.1:0", srv)
	cfg := mcp.Config{Lock: "unused", Servers: []mcp.ServerConfig{{Name: "web", URL: "http://" + addr,
		Tools: map[string]mcp.ToolConfig{"echo": {Class: events.ReadOnly}}}}}
	s := connect(t, cfg, pin(t, cfg), mcp.Options{MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	echo := tool(t, s, "web__echo")
	if _, err := call(t, echo, `{"text":"a"}`); err != nil {
		t.Fatal(err)
	}
	stop()
	if _, err := call(t, echo, `{"text":"b"}`); !errors.Is(err, driver.ErrInterrupted) && !errors.Is(err, mcp.ErrUnavailable) {
		t.Errorf("call with the server gone: got %v, want ErrInterrupted (or ErrUnavailable once the session is known dead)", err)
	}
	if _, err := call(t, echo, `{"text":"c"}`); !errors.Is(err, mcp.ErrUnavailable) {
		t.Errorf("call while it is away: got %v, want ErrUnavailable", err)
	}
	serveOn(t, addr, srv)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := call(t, echo, `{"text":"d"}`)
		if err == nil && out == "echo: d" {
			break
		}
		if !errors.Is(err, mcp.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("after the server is back: got %q, %v", out, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
