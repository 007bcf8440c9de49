package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/mcp"
)

// BenchmarkCall is the adapter's cost per call: the same echo tool, on the
// same server, called through a Set's tool and through a go-sdk client
// session directly, over streamable HTTP on 127.0.0.1 and over stdio (the
// test binary as a go-sdk server). The policy and the events are not in it:
// they are measured by the driver's benchmarks.
func BenchmarkCall(b *testing.B) {
	args := json.RawMessage(`{"text":"hi"}`)
	srv := newServer()
	echoTool(srv, "echo", "Echo the text.", &sdk.ToolAnnotations{ReadOnlyHint: true})
	url := httpServerB(b, srv)
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sc   mcp.ServerConfig
		tr   func() sdk.Transport
	}{
		{"http", mcp.ServerConfig{Name: "web", URL: url}, func() sdk.Transport {
			return &sdk.StreamableClientTransport{Endpoint: url, MaxRetries: -1}
		}},
		// Headers go through the adapter's own round tripper; the direct
		// client sends none.
		{"http-headers", mcp.ServerConfig{Name: "web", URL: url, Headers: map[string]string{"X-Team": "ops"}}, func() sdk.Transport {
			return &sdk.StreamableClientTransport{Endpoint: url, MaxRetries: -1}
		}},
		{"stdio", mcp.ServerConfig{Name: "local", Command: exe, Env: map[string]string{"ARBITER_MCP_TEST_SERVER": "1"}}, func() sdk.Transport {
			cmd := exec.Command(exe)
			cmd.Env = []string{"ARBITER_MCP_TEST_SERVER=1"}
			return &sdk.CommandTransport{Command: cmd}
		}},
	} {
		tc.sc.Tools = map[string]mcp.ToolConfig{"echo": {Class: events.ReadOnly}}
		cfg := mcp.Config{Lock: "unused", Servers: []mcp.ServerConfig{tc.sc}}
		b.Run(tc.name, func(b *testing.B) {
			lock := pinB(b, cfg)
			s, err := mcp.Connect(b.Context(), cfg, lock, mcp.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			echo := s.Tools()[0]
			c := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}})
			sess, err := c.Connect(b.Context(), tc.tr(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer sess.Close()
			ctx := context.Background()
			// The two calls alternate, so both see the same load on a
			// shared machine; each is timed on its own.
			var viaAdapter, direct []time.Duration
			viaSet := func() {
				t0 := time.Now()
				if out, err := echo.Execute(ctx, args); err != nil || out != "echo: hi" {
					b.Fatalf("adapter: got %q, %v", out, err)
				}
				viaAdapter = append(viaAdapter, time.Since(t0))
			}
			viaSDK := func() {
				t0 := time.Now()
				res, err := sess.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: args})
				if err != nil || res.IsError || res.Content[0].(*sdk.TextContent).Text != "echo: hi" {
					b.Fatalf("sdk: got %+v, %v", res, err)
				}
				direct = append(direct, time.Since(t0))
			}
			i := 0
			for b.Loop() {
				// Which goes first alternates too.
				if i%2 == 0 {
					viaSet()
					viaSDK()
				} else {
					viaSDK()
					viaSet()
				}
				i++
			}
			// Medians: a spike from another process on the machine moves a
			// mean, not a median.
			a, d := median(viaAdapter), median(direct)
			b.ReportMetric(float64(a.Nanoseconds()), "adapter-p50-ns")
			b.ReportMetric(float64(d.Nanoseconds()), "sdk-p50-ns")
			b.ReportMetric(float64(a)/float64(d), "adapter/sdk")
		})
	}
}

func pinB(b *testing.B, cfg mcp.Config) mcp.Lock {
	b.Helper()
	s, err := mcp.Connect(b.Context(), cfg, mcp.Lock{}, mcp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l, err := s.Pins()
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
