package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gateway"
)

// gatewayConfig writes a gateway config in front of the filesystem MCP
// server (installed by .ci/run) serving root, where writes need an
// operator, and pins its tools with `arbiter mcp pin`.
func (e *opsEnv) gatewayConfig(t *testing.T, root string) string {
	t.Helper()
	script, err := filepath.Abs("../../.ci/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
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
	var pub string
	for k := range e.ops {
		pub = k
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	cfg := fmt.Sprintf(`mcp:
  lock: tools.lock
  servers:
    - name: fs
      command: node
      args: [%q, %q]
      tools:
        read_text_file: {class: read_only}
        write_file: {class: local_mutation}
policy:
  side_effects: {read_only: allow, local_mutation: require_approval, remote_mutation: require_approval, destructive: require_approval}
operators: {%s: alice}
wait: 100ms
actor: test-host
limits: {max_steps: 250, max_repeats: -1}
`, script, root, pub)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runMCP(t.Context(), []string{"pin", "--config", path}, &bytes.Buffer{}); err != nil {
		t.Fatalf("arbiter mcp pin: %v", err)
	}
	return path
}

// startGateway runs `arbiter gateway --http 127.0.0.1:0` until the test
// ends and returns its URL.
func (e *opsEnv) startGateway(t *testing.T, config string, extra ...string) string {
	t.Helper()
	t.Setenv("TEST_GATEWAY_TOKEN", "s3cret")
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, e.args(append([]string{"--config", config, "--http", "127.0.0.1:0", "--token-env", "TEST_GATEWAY_TOKEN"}, extra...)...), out)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	waitLine(t, out, "listening on")
	m := regexp.MustCompile(`http://\S+/`).FindString(out.String())
	if m == "" {
		t.Fatalf("no URL in %q", out.String())
	}
	return m
}

type tokenTransport struct{}

func (tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer s3cret")
	return http.DefaultTransport.RoundTrip(r)
}

func hostSession(t *testing.T, url string) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "host", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: tokenTransport{}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect host: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func hostCall(t *testing.T, cs *sdk.ClientSession, tool string, args any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

func hostStatus(t *testing.T, cs *sdk.ClientSession) gateway.Status {
	t.Helper()
	out, _ := hostCall(t, cs, gateway.StatusTool, map[string]any{})
	var st gateway.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status %q: %v", out, err)
	}
	return st
}

// The gateway end to end, as an operator meets it: a host over HTTP, the
// npm filesystem server upstream, `arbiter approvals` and `arbiter grant`.
func TestGateway_HostReadsWritesAfterArbiterGrant(t *testing.T) {
	e := newOpsEnv(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	root, _ = filepath.EvalSymlinks(root)
	url := e.startGateway(t, e.gatewayConfig(t, root))
	cs := hostSession(t, url)

	if out, isErr := hostCall(t, cs, "fs__read_text_file", map[string]any{"path": filepath.Join(root, "notes.txt")}); out != "hello" || isErr {
		t.Fatalf("read: %q (error %v)", out, isErr)
	}
	target := filepath.Join(root, "out.txt")
	args := map[string]any{"path": target, "content": "granted"}
	if out, isErr := hostCall(t, cs, "fs__write_file", args); !strings.HasPrefix(out, "WAITING FOR APPROVAL") || isErr {
		t.Fatalf("write: %q (error %v), want it waiting", out, isErr)
	}
	st := hostStatus(t, cs)
	if len(st.Waiting) != 1 {
		t.Fatalf("status: %+v", st)
	}
	var list bytes.Buffer
	if err := runApprovals(t.Context(), e.args(), &list); err != nil || !strings.Contains(list.String(), st.Waiting[0].Approval) {
		t.Fatalf("arbiter approvals: %v\n%s\nwant it to list %s", err, list.String(), st.Waiting[0].Approval)
	}
	if err := runGrant(t.Context(), e.args(st.Run, st.Waiting[0].Approval, "--key", e.key, "--yes"), &bytes.Buffer{}); err != nil {
		t.Fatalf("arbiter grant: %v", err)
	}
	// A changed call does not consume it.
	if out, _ := hostCall(t, cs, "fs__write_file", map[string]any{"path": target, "content": "changed"}); !strings.HasPrefix(out, "NOT RUN") {
		t.Fatalf("changed write: %q, want NOT RUN", out)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the changed write ran: %v", err)
	}
	if out, isErr := hostCall(t, cs, "fs__write_file", args); isErr || strings.HasPrefix(out, "WAITING") {
		t.Fatalf("granted write: %q (error %v)", out, isErr)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "granted" {
		t.Fatalf("file: %q, %v", b, err)
	}
	// The run is the fleet's like any: its events read and verify.
	var trace bytes.Buffer
	if err := runEvents(t.Context(), e.args(st.Run), &trace); err != nil || !strings.Contains(trace.String(), "verified") {
		t.Fatalf("arbiter events: %v\n%s", err, trace.String())
	}
}

// Two gateway processes' worth (two commands, two HTTP servers) in front
// of one JetStream, both serving run R: the host's granted call is made on
// both at once, and the grant is consumed once.
func TestGateway_TwoGatewaysOneGrant(t *testing.T) {
	e := newOpsEnv(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	cfg := e.gatewayConfig(t, root)
	a := hostSession(t, e.startGateway(t, cfg, "--run", "shared"))
	args := map[string]any{"path": filepath.Join(root, "w.txt"), "content": "w"}
	hostCall(t, a, "fs__write_file", args)
	st := hostStatus(t, a)
	b := hostSession(t, e.startGateway(t, cfg, "--run", "shared"))
	if out, _ := hostCall(t, b, "fs__write_file", args); !strings.Contains(out, st.Waiting[0].Approval) {
		t.Fatalf("second gateway: %q, want it waiting on %s", out, st.Waiting[0].Approval)
	}
	if err := runGrant(t.Context(), e.args("shared", st.Waiting[0].Approval, "--key", e.key, "--yes"), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, cs := range []*sdk.ClientSession{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "fs__write_file", Arguments: args}); err != nil {
				t.Errorf("call: %v", err)
			}
		}()
	}
	wg.Wait()
	consumed := 0
	for _, r := range e.records(t, "shared") {
		if bytes.Contains(r.Event.Body, []byte(`"consumes":"`+st.Waiting[0].Approval+`"`)) {
			consumed++
		}
	}
	if consumed != 1 {
		t.Fatalf("grant consumed %d times, want 1", consumed)
	}
}

// `arbiter gateway` on stdio, as Claude Desktop starts it: the host writes
// the gateway's stdin and reads its stdout. The gateway takes the process's
// stdin and stdout when it starts serving, so they are swapped for pipes
// until the host's initialize is answered.
func TestGateway_StdioAsADesktopHostStartsIt(t *testing.T) {
	e := newOpsEnv(t)
	root, _ := filepath.EvalSymlinks(t.TempDir())
	if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := e.gatewayConfig(t, root)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	oldIn, oldOut := os.Stdin, os.Stdout
	os.Stdin, os.Stdout = inR, outW
	restore := func() { os.Stdin, os.Stdout = oldIn, oldOut }
	defer restore()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runGateway(ctx, e.args("--config", cfg, "--run", "desktop"), &bytes.Buffer{})
	}()
	c := sdk.NewClient(&sdk.Implementation{Name: "desktop", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
	restore()
	if err != nil {
		cancel()
		t.Fatalf("connect over stdio: %v", err)
	}
	if out, isErr := hostCall(t, cs, "fs__read_text_file", map[string]any{"path": filepath.Join(root, "notes.txt")}); out != "hello" || isErr {
		t.Fatalf("read: %q (error %v)", out, isErr)
	}
	if st := hostStatus(t, cs); st.Run != "desktop" || st.Steps != 1 {
		t.Fatalf("status: %+v, want run desktop with one step", st)
	}
	// The file's limits are the run's, a field left out the default.
	recs, _, err := e.log.Read(t.Context(), "desktop")
	if err != nil {
		t.Fatal(err)
	}
	var created events.RunCreatedBody
	if err := json.Unmarshal(recs[0].Event.Body, &created); err != nil {
		t.Fatal(err)
	}
	if want := (events.Limits{MaxSteps: 250, MaxFailuresInRow: driver.DefaultLimits.MaxFailuresInRow}); created.Limits != want {
		t.Fatalf("the run's limits: %+v, want %+v", created.Limits, want)
	}
	cs.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("gateway: %v", err)
	}
	for _, f := range []*os.File{inR, inW, outR, outW} {
		f.Close()
	}
}
