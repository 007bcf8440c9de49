package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/gateway"
	"github.com/arbiter-run/arbiter/testkit"
)

func TestGateway_ReadPassesWriteWaitsGrantRunsOnce(t *testing.T) {
	root, tools := upstream(t)
	f := newFleet(t)
	cs := host(t, f.gateway(t, tools, "").Server())

	// Only the pinned, classified tools and the status tool are listed.
	if names := listed(t, cs); strings.Join(names, ",") != "arbiter_status,fs__read_text_file,fs__write_file" {
		t.Fatalf("listed: %v, want the two the operator classified and the status tool", names)
	}
	if st := status(t, cs); st.Run != "" || len(st.Waiting) != 0 {
		t.Fatalf("status before any call: %+v, want no run", st)
	}

	out, isErr := callTool(t, cs, "fs__read_text_file", map[string]any{"path": filepath.Join(root, "notes.txt")})
	if out != "hello" || isErr {
		t.Fatalf("read: got %q (error %v), want hello", out, isErr)
	}

	target := filepath.Join(root, "out.txt")
	write := func(content string) (string, bool) {
		return callTool(t, cs, "fs__write_file", map[string]any{"path": target, "content": content})
	}
	out, isErr = write("one")
	if !strings.HasPrefix(out, "WAITING FOR APPROVAL") || isErr {
		t.Fatalf("write: got %q (error %v), want a result saying it waits", out, isErr)
	}
	st := status(t, cs)
	if len(st.Waiting) != 1 || st.Waiting[0].Tool != "fs__write_file" || !strings.Contains(out, st.Waiting[0].Approval) {
		t.Fatalf("status: %+v, want the write waiting on the approval the result named", st)
	}
	wantNoFile(t, target)

	f.decide(t, st, events.DecisionGrant)
	// A changed call does not consume the grant, and runs nothing.
	out, isErr = write("two")
	if !strings.HasPrefix(out, "NOT RUN") || isErr {
		t.Fatalf("changed write: got %q (error %v), want NOT RUN", out, isErr)
	}
	wantNoFile(t, target)

	// The identical call runs, once.
	out, isErr = write("one")
	if isErr || strings.HasPrefix(out, "WAITING") {
		t.Fatalf("granted write: got %q (error %v)", out, isErr)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "one" {
		t.Fatalf("file after the granted write: %q, %v", b, err)
	}
	// The same call again needs an approval of its own.
	if err := os.Remove(target); err != nil {
		t.Fatal(err)
	}
	out, _ = write("one")
	if !strings.HasPrefix(out, "WAITING FOR APPROVAL") {
		t.Fatalf("write again: got %q, want it to wait for a new approval", out)
	}
	wantNoFile(t, target)
	if again := status(t, cs); len(again.Waiting) != 1 || again.Waiting[0].Approval == st.Waiting[0].Approval {
		t.Fatalf("status: %+v, want a new approval waiting", again)
	}
	if n := kindCount(t, f.log, st.Run, events.StepObserved); n != 2 {
		t.Fatalf("observations: %d, want 2 (the read and the one write)", n)
	}
}

func TestGateway_DenialEndsTheSession(t *testing.T) {
	root, tools := upstream(t)
	f := newFleet(t)
	cs := host(t, f.gateway(t, tools, "").Server())
	args := map[string]any{"path": filepath.Join(root, "x.txt"), "content": "x"}
	callTool(t, cs, "fs__write_file", args)
	f.decide(t, status(t, cs), events.DecisionDeny)
	out, isErr := callTool(t, cs, "fs__write_file", args)
	if !isErr || !strings.Contains(out, "denied") {
		t.Fatalf("denied write: got %q (error %v), want an error result saying it was denied", out, isErr)
	}
	out, isErr = callTool(t, cs, "fs__read_text_file", map[string]any{"path": filepath.Join(root, "notes.txt")})
	if !isErr || !strings.Contains(out, "has ended") {
		t.Fatalf("read after the denial: got %q (error %v), want the run ended", out, isErr)
	}
	wantNoFile(t, filepath.Join(root, "x.txt"))
}

func TestGateway_RefusedArgumentsAndUpstreamErrorsAreErrorResults(t *testing.T) {
	_, tools := upstream(t)
	f := newFleet(t)
	cs := host(t, f.gateway(t, tools, "").Server())
	out, isErr := callTool(t, cs, "fs__read_text_file", map[string]any{"path": 7})
	if !isErr || !strings.Contains(out, string(events.ObsInvalidArguments)) {
		t.Fatalf("bad arguments: got %q (error %v)", out, isErr)
	}
	out, isErr = callTool(t, cs, "fs__read_text_file", map[string]any{"path": "/etc/hostname"})
	if !isErr || !strings.Contains(out, string(events.ObsToolError)) {
		t.Fatalf("read outside the root: got %q (error %v), want the server's error as a tool error", out, isErr)
	}
}

// counting counts a tool's executions upstream.
type counting struct {
	driver.Tool
	n atomic.Int32
}

func (c *counting) Execute(ctx context.Context, args json.RawMessage) (string, error) {
	c.n.Add(1)
	return c.Tool.Execute(ctx, args)
}

// Two gateways in front of one log hold the same run (a host reconnected
// to another gateway, say) and both make the granted call at once: the
// grant is consumed by one fenced append, and the write runs once.
func TestGateway_TwoGatewaysConsumeAGrantOnce(t *testing.T) {
	root, tools := upstream(t)
	var write *counting
	for i, tl := range tools {
		if tl.Spec().Name == "fs__write_file" {
			write = &counting{Tool: tl}
			tools[i] = write
		}
	}
	f := newFleet(t)
	a := host(t, f.gateway(t, tools, "shared").Server())
	args := map[string]any{"path": filepath.Join(root, "w.txt"), "content": "w"}
	callTool(t, a, "fs__write_file", args)
	st := status(t, a)
	b := host(t, f.gateway(t, tools, "shared").Server())
	if out, _ := callTool(t, b, "fs__write_file", args); !strings.Contains(out, st.Waiting[0].Approval) {
		t.Fatalf("second gateway: got %q, want the same call waiting on %s", out, st.Waiting[0].Approval)
	}
	f.decide(t, st, events.DecisionGrant)
	var wg sync.WaitGroup
	outs := make([]string, 2)
	for i, cs := range []*sdk.ClientSession{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "fs__write_file", Arguments: args})
			if err != nil {
				t.Errorf("call: %v", err)
				return
			}
			if tc, ok := res.Content[0].(*sdk.TextContent); ok {
				outs[i] = tc.Text
			}
		}()
	}
	wg.Wait()
	if n := write.n.Load(); n != 1 {
		t.Fatalf("upstream writes: %d, want 1", n)
	}
	recs, _, err := f.log.Read(t.Context(), "shared")
	if err != nil {
		t.Fatal(err)
	}
	consumed := 0
	for _, r := range recs {
		var pb events.PolicyBody
		if r.Event.Kind == events.StepPolicy && json.Unmarshal(r.Event.Body, &pb) == nil && pb.Consumes == st.Waiting[0].Approval {
			consumed++
		}
	}
	if consumed != 1 {
		t.Fatalf("grant consumed %d times, want 1", consumed)
	}
	// Neither took the other's live call for an interrupted one.
	if n := kindCount(t, f.log, "shared", events.ApprovalRequested); n != 1 {
		t.Fatalf("approvals requested: %d, want 1", n)
	}
	for i, o := range outs {
		t.Logf("host %d: %s", i, o)
	}
}

func TestGateway_HTTPNeedsTheToken(t *testing.T) {
	_, tools := upstream(t)
	f := newFleet(t)
	g := f.gateway(t, tools, "")
	if _, err := g.HTTP(""); !errors.Is(err, gateway.ErrNoToken) {
		t.Fatalf("no token: got %v, want %v", err, gateway.ErrNoToken)
	}
	h, err := g.HTTP("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	connect := func(token string) error {
		hc := &http.Client{Transport: bearer{token: token}}
		c := sdk.NewClient(&sdk.Implementation{Name: "host", Version: "1"}, nil)
		cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: hc, MaxRetries: -1}, nil)
		if err != nil {
			return err
		}
		defer cs.Close()
		_, err = cs.ListTools(t.Context(), nil)
		return err
	}
	if err := connect("wrong"); err == nil {
		t.Fatal("wrong token: connected")
	}
	if err := connect("s3cret"); err != nil {
		t.Fatalf("right token: %v", err)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestNew_RefusesBadConfig(t *testing.T) {
	if _, err := gateway.New(gateway.Config{}); !errors.Is(err, gateway.ErrConfig) {
		t.Fatalf("no tools: got %v, want %v", err, gateway.ErrConfig)
	}
	notObject := testkit.NewLedger("fs__odd", events.ReadOnly, `{"type":"string"}`)
	if _, err := gateway.New(gateway.Config{Tools: []driver.Tool{notObject}}); !errors.Is(err, gateway.ErrConfig) || !strings.Contains(err.Error(), "fs__odd") {
		t.Fatalf("string schema: got %v, want %v naming the tool", err, gateway.ErrConfig)
	}
}

func wantNoFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: %v, want it not written", path, err)
	}
}

// Over the stdio transport's framing (newline-delimited JSON-RPC on pipes),
// as a desktop host that started the gateway talks to it.
func TestGateway_OverStdioFraming(t *testing.T) {
	root, tools := upstream(t)
	f := newFleet(t)
	cs := stdioHost(t, f.gateway(t, tools, "desktop").Server())
	out, isErr := callTool(t, cs, "fs__read_text_file", map[string]any{"path": filepath.Join(root, "notes.txt")})
	if out != "hello" || isErr {
		t.Fatalf("read: got %q (error %v)", out, isErr)
	}
	if st := status(t, cs); st.Run != "desktop" || st.Steps != 1 {
		t.Fatalf("status: %+v, want run desktop with one step", st)
	}
}

// blocking holds a tool's execution until released.
type blocking struct {
	driver.Tool
	started, release chan struct{}
}

func (b *blocking) Execute(ctx context.Context, args json.RawMessage) (string, error) {
	close(b.started)
	<-b.release
	return b.Tool.Execute(ctx, args)
}

// The status tool answers while a call runs upstream, without waiting for
// it and without touching the run the call is driving.
func TestGateway_StatusWhileACallRuns(t *testing.T) {
	root, tools := upstream(t)
	var slow *blocking
	for i, tl := range tools {
		if tl.Spec().Name == "fs__read_text_file" {
			slow = &blocking{Tool: tl, started: make(chan struct{}), release: make(chan struct{})}
			tools[i] = slow
		}
	}
	f := newFleet(t)
	cs := host(t, f.gateway(t, tools, "").Server())
	done := make(chan string, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "fs__read_text_file", Arguments: map[string]any{"path": filepath.Join(root, "notes.txt")}})
		if err != nil {
			done <- err.Error()
			return
		}
		done <- res.Content[0].(*sdk.TextContent).Text
	}()
	<-slow.started
	if st := status(t, cs); st.Status != "a call is running" || st.Run == "" {
		t.Fatalf("status during a call: %+v", st)
	}
	close(slow.release)
	if out := <-done; out != "hello" {
		t.Fatalf("read: %q", out)
	}
	if st := status(t, cs); st.Steps != 1 || st.Status != "RUNNING" {
		t.Fatalf("status after the call: %+v", st)
	}
}

// TestGateway_NamedRunOfAnotherActorOrAFleetIsRefused: a gateway told to
// carry on run "desk" does not take over a run opened for another actor
// (its calls would be judged as that actor's) or one a fleet drives: each
// call says why and runs nothing, and the next call asks for the named run
// again rather than opening another. Once the run is one it may carry on
// (here, a new id's run opened by it), calls go through.
func TestGateway_NamedRunOfAnotherActorOrAFleetIsRefused(t *testing.T) {
	root, tools := upstream(t)
	f := newFleet(t)
	specs := make([]driver.Spec, len(tools))
	for i, tool := range tools {
		specs[i] = tool.Spec()
	}
	g, err := gate.New(gate.Config{Log: f.log, Policy: writesNeedApproval, Operators: f.ops, Tools: specs})
	if err != nil {
		t.Fatal(err)
	}
	other, err := g.Open(t.Context(), "desk", "someone-else", nil)
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	if _, err := g.Driver().Create(t.Context(), "fleet-run", "scripted", nil); err != nil {
		t.Fatal(err)
	}
	read := map[string]any{"path": filepath.Join(root, "notes.txt")}
	for run, want := range map[string]string{"desk": `opened as "gate:someone-else"`, "fleet-run": "not a gate run"} {
		cs := host(t, f.gateway(t, tools, run).Server())
		before := kindCount(t, f.log, run, events.StepDecided)
		for range 2 {
			out, isErr := callTool(t, cs, "fs__read_text_file", read)
			if !isErr || !strings.Contains(out, want) || !strings.Contains(out, run) {
				t.Fatalf("call on %s: got %q (error %v), want an error naming the run and saying %q", run, out, isErr, want)
			}
		}
		if n := kindCount(t, f.log, run, events.StepDecided); n != before {
			t.Errorf("%d decisions recorded on %s by a gateway that may not carry it on", n-before, run)
		}
		if st := status(t, cs); st.Run != "" {
			t.Errorf("status names run %q after the refusals, want none opened", st.Run)
		}
	}
	cs := host(t, f.gateway(t, tools, "mine").Server())
	if out, isErr := callTool(t, cs, "fs__read_text_file", read); isErr {
		t.Fatalf("a read on the gateway's own named run: %q", out)
	}
}
