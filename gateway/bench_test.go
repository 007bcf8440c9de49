package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/gateway"
	"github.com/arbiter-run/arbiter/internal/stack"
	"github.com/arbiter-run/arbiter/mcp"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// BenchmarkGateway is the gateway's cost per call, in one run (one host
// session of b.N calls): the same echo call made by a go-sdk client
// through the gateway (host to gateway over stdio framing on pipes, the
// gateway to the upstream over stdio), through a bare MCP server on the
// same framing that calls the same upstream tool at once (the second MCP
// hop without the gate), through a second bare server that also makes the
// two fenced appends an allowed call records where the gateway makes them
// (a step.decided before the upstream call, a step.observed after it,
// each timed), and straight to the same upstream server over stdio, in an
// order shuffled each round. After each round two more appends are timed on the same
// server: the first finds it idle ("cold"), the second follows it
// ("warm").
//
// The goal is (gateway - hop) at most the two appends a call records. The
// appends timed inside the second hop are the reference that matches it:
// made in the same places as the gateway's, after an MCP hop and after an
// upstream call, they find the server as idle as the gateway's do
// (gate/2appends-in-hop). What they add to the hop's call in all, their
// own time and the server's work after each acknowledgement that the
// upstream call then competes with, is the other reference
// (gate/appends-added-to-hop: (gateway - hop) over (hop+appends - hop)).
// The cold and warm pair after the round is the older reference
// (gate/2appends), kept to compare with earlier figures. A fifth way, the
// floor, is a bare hop doing only what no gate can skip: the schema check
// of the arguments, the policy, and the same two appends with the bodies
// the driver records (see floorCall); gate/floor is (gateway - hop) over
// (floor - hop), and gateway-floor-µs what the gateway costs beyond it,
// which is the gate's and the driver's own work.
// And the cost must not grow with the session: the median of the last
// tenth of the gateway's calls against that of the first tenth.
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
	// The same hop with the gate's two appends and nothing else of the
	// gate: what the goal allows the gateway, made where it makes them.
	hopApp := newAppender(b, f.log, "bench-hop-appends")
	var inHop []time.Duration
	withAppends := sdk.NewServer(&sdk.Implementation{Name: "bare-appends", Version: "1"}, nil)
	withAppends.AddTool(&sdk.Tool{Name: "up__echo", InputSchema: json.RawMessage(up.Spec().Schema)}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		// As the gate does before its drive (gate/stack.go), so that
		// neither pays for growing its stack inside an append.
		stack.Grow()
		d1, err := hopApp.appendDecided(req.Params.Arguments)
		if err != nil {
			return nil, err
		}
		out, err := up.Execute(ctx, req.Params.Arguments)
		if err != nil {
			return nil, err
		}
		d2, err := hopApp.appendObserved(out)
		if err != nil {
			return nil, err
		}
		inHop = append(inHop, d1+d2)
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: out}}}, nil
	})
	hop2 := stdioHost(b, withAppends)
	// The floor: the same hop doing the work no gate can skip, and only
	// that: the schema check of the arguments (with their canonical form),
	// the policy's evaluation, and the two events the gate records with
	// their real bodies (the decision carrying the policy's ruling, the
	// observation carrying the call's result), each a fenced append.
	floorLog := newAppender(b, f.log, "bench-floor")
	floor := sdk.NewServer(&sdk.Implementation{Name: "floor", Version: "1"}, nil)
	floorTool, err := driver.Compile(up)
	if err != nil {
		b.Fatal(err)
	}
	pol := policy.DefaultSideEffects()
	floor.AddTool(&sdk.Tool{Name: "up__echo", InputSchema: json.RawMessage(up.Spec().Schema)}, func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		stack.Grow()
		out, err := floorLog.floorCall(ctx, floorTool, pol, req.Params.Arguments, up.Execute)
		if err != nil {
			return nil, err
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: out}}}, nil
	})
	hopFloor := stdioHost(b, floor)

	cmd := exec.Command(exe)
	cmd.Env = env
	direct, err := sdk.NewClient(&sdk.Implementation{Name: "host", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer direct.Close()

	app := newAppender(b, f.log, "bench-appends")
	var viaGW, viaHop, viaHop2, viaFloor, straight, warm, cold, pairs []time.Duration
	call := func(cs *sdk.ClientSession, name string, i int, into *[]time.Duration) {
		t0 := time.Now()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: map[string]any{"text": fmt.Sprint(i)}})
		d := time.Since(t0)
		if err != nil || res.IsError || res.Content[0].(*sdk.TextContent).Text != fmt.Sprintf("echo: %d", i) {
			b.Fatalf("%s: %+v, %v", name, res, err)
		}
		*into = append(*into, d)
	}
	order := rand.New(rand.NewPCG(1, 2))
	i := 0
	for b.Loop() {
		// The order is shuffled each round, so that each way follows each
		// other way as often: the server's work after an append (the
		// gateway's, the second hop's) slows what comes next, and with a
		// rotation the hop always came after the gateway.
		calls := []func(){
			func() { call(via, "up__echo", i, &viaGW) },
			func() { call(hop, "up__echo", i, &viaHop) },
			func() { call(direct, "echo", i, &straight) },
			func() { call(hop2, "up__echo", i, &viaHop2) },
			func() { call(hopFloor, "up__echo", i, &viaFloor) },
		}
		for _, k := range order.Perm(len(calls)) {
			calls[k]()
		}
		// The first append after the calls finds the server idle, as the
		// gateway's appends do after an MCP hop.
		c, err := app.appendObserved("echo: 12345")
		if err != nil {
			b.Fatal(err)
		}
		w, err := app.appendObserved("echo: 12345")
		if err != nil {
			b.Fatal(err)
		}
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
	in, h2 := median(inHop), median(viaHop2)
	b.ReportMetric(float64(h2.Microseconds()), "hop+appends-p50-µs")
	b.ReportMetric(float64(in.Microseconds()), "2appends-in-hop-p50-µs")
	b.ReportMetric(float64(gw-h)/float64(in), "gate/2appends-in-hop")
	b.ReportMetric(float64(gw-h)/float64(h2-h), "gate/appends-added-to-hop")
	b.ReportMetric(float64(gw-d)/float64(p), "added/2appends")
	fl := median(viaFloor)
	b.ReportMetric(float64(fl.Microseconds()), "floor-p50-µs")
	b.ReportMetric(float64(gw-h)/float64(fl-h), "gate/floor")
	b.ReportMetric(float64((gw - fl).Microseconds()), "gateway-floor-µs")
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

// appender makes fenced appends of events the size of the gateway's to a
// run of its own.
type appender struct {
	log  *events.Log
	run  string
	tail events.Tail
	step int
}

func newAppender(b *testing.B, log *events.Log, run string) *appender {
	b.Helper()
	a := &appender{log: log, run: run}
	ev, err := events.New(a.run, events.RunCreated, events.RunCreatedBody{Agent: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if a.tail, err = log.Append(context.Background(), events.Tail{}, ev); err != nil {
		b.Fatal(err)
	}
	return a
}

// appendDecided appends a step.decided carrying its allow, as the gate
// records an allowed call, and returns how long the append took.
func (a *appender) appendDecided(args json.RawMessage) (time.Duration, error) {
	a.step++
	return a.append(events.StepDecided, events.StepDecidedBody{Step: a.step, Tool: "up__echo", Args: string(args),
		Policy: &events.PolicyBody{Step: a.step, Outcome: events.Allow, Reason: "read_only is allowed", PolicyID: "side-effects", Args: args}})
}

// appendObserved appends a step.observed of content.
func (a *appender) appendObserved(content string) (time.Duration, error) {
	return a.append(events.StepObserved, events.ObservedBody{Step: a.step, Kind: events.ObsResult, Content: content})
}

// floorCall is the floor's call (see BenchmarkGateway): what no gate can
// skip. It checks raw against ct's schema, asks pol about the canonical
// arguments, appends the decision carrying the ruling as the driver records
// it (ADR 0017), runs exec with the canonical arguments, and appends its
// result as the observation.
func (a *appender) floorCall(ctx context.Context, ct *driver.CompiledTool, pol policy.Policy, raw json.RawMessage, exec func(context.Context, json.RawMessage) (string, error)) (string, error) {
	canon, err := ct.CheckArgs(raw)
	if err != nil {
		return "", err
	}
	a.step++
	v := policy.Ask(ctx, pol, policy.Request{Run: a.run, Step: a.step, Tool: ct.Record, Args: canon}, projector.View{})
	if v.Err != nil || v.Outcome != events.Allow {
		return "", fmt.Errorf("floor: policy said %s %q: %v", v.Outcome, v.Reason, v.Err)
	}
	if _, err := a.append(events.StepDecided, events.StepDecidedBody{Step: a.step, Tool: ct.Spec.Name, Args: string(raw),
		Policy: &events.PolicyBody{Step: a.step, Outcome: v.Outcome, Reason: v.Reason, PolicyID: policy.ID(pol),
			Args: canon, ToolHash: ct.Record.Hash, Parts: v.Parts}}); err != nil {
		return "", err
	}
	out, err := exec(ctx, canon)
	if err != nil {
		return "", err
	}
	if _, err := a.append(events.StepObserved, events.ObservedBody{Step: a.step, Kind: events.ObsResult, Content: out}); err != nil {
		return "", err
	}
	return out, nil
}

// append times the append alone, not the making of the event.
func (a *appender) append(k events.Kind, body any) (time.Duration, error) {
	ev, err := events.New(a.run, k, body)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	tail, err := a.log.Append(context.Background(), a.tail, ev)
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	a.tail = tail
	return d, nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
