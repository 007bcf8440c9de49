package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/gateway"
	"github.com/arbiter-run/arbiter/mcp"
	"github.com/arbiter-run/arbiter/policy"
)

// BenchmarkGateway is the gateway's cost per call, in one run (one host
// session of b.N calls): the same echo call made by a go-sdk client
// through the gateway (host to gateway over stdio framing on pipes, the
// gateway to the upstream over stdio), through a bare MCP server on the
// same framing that calls the same upstream tool at once (the second MCP
// hop without the gate), and straight to the same upstream server over
// stdio, in rotating order, with the two fenced appends an allowed call
// records (step.decided carrying its allow, step.observed) timed after
// each round on the same server: the first finds the server idle, as the
// gateway's appends do after an MCP hop ("cold"), the second follows it
// ("warm"). The goal is (gateway - hop) at most those two appends; and the
// cost must not grow with the session: the median of the last tenth of
// the gateway's calls against that of the first tenth.
func BenchmarkGateway(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	env := []string{"ARBITER_GATEWAY_TEST_SERVER=1"}
	cfg := mcp.Config{Lock: "unused", Servers: []mcp.ServerConfig{{
		Name: "up", Command: exe, Env: map[string]string{"ARBITER_GATEWAY_TEST_SERVER": "1"},
		Tools: map[string]mcp.ToolConfig{"echo": {Class: events.ReadOnly}},
	}}}
	ctx := context.Background()
	s, err := mcp.Connect(ctx, cfg, mcp.Lock{}, mcp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	lock, err := s.Pins()
	s.Close()
	if err != nil {
		b.Fatal(err)
	}
	set, err := mcp.Connect(ctx, cfg, lock, mcp.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()
	f := newFleet(b)
	g, err := gateway.New(gateway.Config{
		Gate:  gate.Config{Log: f.log, Policy: policy.DefaultSideEffects(), Limits: events.Limits{MaxSteps: 1 << 30, MaxRepeats: 1 << 30}},
		Tools: set.Tools(),
	})
	if err != nil {
		b.Fatal(err)
	}
	via := stdioHost(b, g.Server())
	// The same hop without the gate: an MCP server whose tool calls the
	// upstream tool at once, so the gate's own share can be told apart
	// from the cost of a second MCP hop.
	bare := sdk.NewServer(&sdk.Implementation{Name: "bare", Version: "1"}, nil)
	up := set.Tools()[0]
	bare.AddTool(&sdk.Tool{Name: "up__echo", InputSchema: json.RawMessage(up.Spec().Schema)}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		out, err := up.Execute(ctx, req.Params.Arguments)
		if err != nil {
			return nil, err
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: out}}}, nil
	})
	hop := stdioHost(b, bare)

	cmd := exec.Command(exe)
	cmd.Env = env
	direct, err := sdk.NewClient(&sdk.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()

	app := newAppender(b, f.log)
	var viaGW, viaHop, straight, warm, cold, pairs []time.Duration
	call := func(cs *sdk.ClientSession, name string, i int, into *[]time.Duration) {
		t0 := time.Now()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: map[string]any{"text": fmt.Sprint(i)}})
		d := time.Since(t0)
		if err != nil || res.IsError || res.Content[0].(*sdk.TextContent).Text != fmt.Sprintf("echo: %d", i) {
			b.Fatalf("%s: %+v, %v", name, res, err)
		}
		*into = append(*into, d)
	}
	i := 0
	for b.Loop() {
		// Which goes first rotates, so all see the same load.
		calls := []func(){
			func() { call(via, "up__echo", i, &viaGW) },
			func() { call(hop, "up__echo", i, &viaHop) },
			func() { call(direct, "echo", i, &straight) },
		}
		for k := range calls {
			calls[(i+k)%len(calls)]()
		}
		// The first append after the calls finds the server idle, as the
		// gateway's appends do after an MCP hop.
		c := app.append(b)
		w := app.append(b)
		cold, warm, pairs = append(cold, c), append(warm, w), append(pairs, c+w)
		i++
	}
	gw, h, d, p := median(viaGW), median(viaHop), median(straight), median(pairs)
	b.ReportMetric(float64(gw.Microseconds()), "gateway-p50-µs")
	b.ReportMetric(float64(h.Microseconds()), "hop-p50-µs")
	b.ReportMetric(float64(d.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(median(cold).Microseconds()), "cold-append-p50-µs")
	b.ReportMetric(float64(median(warm).Microseconds()), "warm-append-p50-µs")
	b.ReportMetric(float64(p.Microseconds()), "2appends-p50-µs")
	b.ReportMetric(float64(gw-h)/float64(p), "gate/2appends")
	b.ReportMetric(float64(gw-d)/float64(p), "added/2appends")
	if n := len(viaGW) / 10; n >= 10 {
		b.ReportMetric(float64(median(viaGW[len(viaGW)-n:]))/float64(median(viaGW[:n])), "last/first-tenth")
	}
}

// stdioHost connects a go-sdk client to srv over a pair of pipes with the
// stdio transport's framing (newline-delimited JSON-RPC), as a desktop
// host talks to a gateway it started.
func stdioHost(b testing.TB, srv *sdk.Server) *sdk.ClientSession {
	b.Helper()
	hostR, gwW := io.Pipe()
	gwR, hostW := io.Pipe()
	ss, err := srv.Connect(context.Background(), &sdk.IOTransport{Reader: gwR, Writer: gwW}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "host", Version: "1"}, nil).Connect(context.Background(), &sdk.IOTransport{Reader: hostR, Writer: hostW}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

// appender makes fenced appends of a step.observed event the size of the
// gateway's to a run of its own.
type appender struct {
	log  *events.Log
	run  string
	tail events.Tail
}

func newAppender(b *testing.B, log *events.Log) *appender {
	b.Helper()
	a := &appender{log: log, run: "bench-appends"}
	ev, err := events.New(a.run, events.RunCreated, events.RunCreatedBody{Agent: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if a.tail, err = log.Append(context.Background(), events.Tail{}, ev); err != nil {
		b.Fatal(err)
	}
	return a
}

func (a *appender) append(b *testing.B) time.Duration {
	ev, err := events.New(a.run, events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "echo: 12345"})
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Now()
	tail, err := a.log.Append(context.Background(), a.tail, ev)
	d := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	a.tail = tail
	return d
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
