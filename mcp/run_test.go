package mcp_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nkeys"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/mcp"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/testkit"
)

// fsPolicy is the example's: reads run, writes wait for an operator.
var fsPolicy = policy.WithID(policy.SideEffectPolicy{
	events.ReadOnly:    events.Allow,
	events.Destructive: events.RequireApproval,
}, "mcp example: reads allowed, writes need approval")

// worker is one worker's driver over its own connection to the servers.
func worker(t *testing.T, log *events.Log, cfg mcp.Config, lock mcp.Lock, ops approvals.Operators) *driver.Driver {
	t.Helper()
	s := connect(t, cfg, lock, mcp.Options{})
	tools := append(s.Tools(), testkit.NewLedger("finish", events.ReadOnly, testkit.AnyObject).Terminal())
	d, err := driver.New(driver.Config{Log: log, Policy: fsPolicy, Tools: tools, Operators: ops})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func newOperator(t *testing.T) (nkeys.KeyPair, approvals.Operators) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return kp, approvals.Operators{pub: "alice"}
}

// grantPending signs a grant of the approval run waits on and publishes
// it, as "arbiter grant" does; the next drive records and acts on it.
func grantPending(t *testing.T, log *events.Log, d *driver.Driver, run string, kp nkeys.KeyPair) projector.Approval {
	t.Helper()
	r, err := d.Load(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	v := r.View()
	a := v.PendingApproval()
	if a == nil {
		t.Fatalf("run %s (%s %s): no pending approval", run, v.Run.Status, v.Run.Reason)
	}
	if _, err := client.New(log, nil).Grant(t.Context(), kp, run, a.ID, "reviewed the write"); err != nil {
		t.Fatal(err)
	}
	return *a
}

func observations(t *testing.T, log *events.Log, run string, step int) []events.ObservedBody {
	t.Helper()
	recs, _, err := log.Read(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.ObservedBody
	for _, rec := range recs {
		if rec.Event.Kind != events.StepObserved {
			continue
		}
		b, err := events.DecodeBody[events.ObservedBody](rec.Event)
		if err != nil {
			t.Fatal(err)
		}
		if b.Step == step {
			out = append(out, b)
		}
	}
	return out
}

// A run reads and writes through the filesystem server: the read runs, the
// write waits for a signed approval, a second worker picks the grant up and
// the write runs once.
func TestDriver_FilesystemRunAcrossTwoWorkers(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "notes.txt"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := filesystemServer(t, root)
	sc.Tools = map[string]mcp.ToolConfig{"read_text_file": {Class: events.ReadOnly}, "write_file": {Class: events.Destructive}}
	cfg := mcp.Config{Lock: "unused", Servers: []mcp.ServerConfig{sc}}
	lock := pin(t, cfg)
	log := testkit.JetStream(t).Log(t, events.Config{})
	kp, ops := newOperator(t)
	d1, d2 := worker(t, log, cfg, lock, ops), worker(t, log, cfg, lock, ops)
	out := filepath.Join(root, "out.txt")
	agent := scripted.Agent{Decisions: []driver.Action{
		scripted.Call("fs__read_text_file", `{"path":"`+filepath.Join(root, "notes.txt")+`"}`),
		scripted.Call("fs__write_file", `{"path":"`+out+`","content":"hello, written"}`),
		scripted.Call("finish", `{}`),
	}}

	r, err := d1.Create(t.Context(), "fs-run", "script", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Drive(t.Context(), r, agent); err != nil {
		t.Fatal(err)
	}
	v := r.View()
	if v.Run.Status != projector.Waiting {
		t.Fatalf("after worker 1: status %s %q, want waiting", v.Run.Status, v.Run.Reason)
	}
	if o := observations(t, log, "fs-run", 1); len(o) != 1 || o[0].Kind != events.ObsResult || o[0].Content != "hello" {
		t.Errorf("the read: got %+v, want one result hello", o)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("the write ran before its approval: %v", err)
	}

	a := grantPending(t, log, d2, "fs-run", kp)
	if a.Step != 2 || a.Kind != string(events.Destructive) {
		t.Errorf("approval: step %d kind %s, want step 2 destructive", a.Step, a.Kind)
	}
	r2, err := d2.Load(t.Context(), "fs-run")
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Drive(t.Context(), r2, agent); err != nil {
		t.Fatal(err)
	}
	if v := r2.View(); v.Run.Status != projector.Completed {
		t.Errorf("after worker 2: status %s %q, want completed", v.Run.Status, v.Run.Reason)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "hello, written" {
		t.Errorf("the file: got %q, %v", b, err)
	}
	// Worker 1 comes back to the run: nothing runs again.
	if err := d1.Refresh(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if err := d1.Drive(t.Context(), r, agent); err != nil {
		t.Fatal(err)
	}
	if o := observations(t, log, "fs-run", 2); len(o) != 1 || o[0].Kind != events.ObsResult {
		t.Errorf("the write's observations: got %+v, want exactly one result", o)
	}
	// The recorded spec carries the pin the approval was bound to.
	for _, s := range r2.View().Run.Tools {
		if s.Name == "fs__write_file" && s.Pin != lock.Servers["fs"]["write_file"].Hash {
			t.Errorf("recorded pin %q, want the lock's %q", s.Pin, lock.Servers["fs"]["write_file"].Hash)
		}
	}
}

// A stdio server killed mid-call during a write: the step ends as an
// interrupted side effect waiting for an operator, never run again
// silently.
func TestDriver_ServerKilledMidWriteWaitsForOperator(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	sc := stdioServer(t, "local", map[string]string{"ARBITER_MCP_PID_FILE": pidFile})
	sc.Tools = map[string]mcp.ToolConfig{"hang": {Class: events.LocalMutation}}
	cfg := mcp.Config{Lock: "unused", Servers: []mcp.ServerConfig{sc}}
	lock := pin(t, cfg)
	log := testkit.JetStream(t).Log(t, events.Config{})
	s := connect(t, cfg, lock, mcp.Options{MinBackoff: 50 * time.Millisecond})
	hang := s.Tools()[0]
	p := policy.WithID(policy.SideEffectPolicy{events.LocalMutation: events.Allow}, "writes allowed")
	_, ops := newOperator(t)
	d, err := driver.New(driver.Config{Log: log, Policy: p, Tools: []driver.Tool{hang}, Operators: ops})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
				if pid, err := strconv.Atoi(string(b)); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	r, err := d.Create(t.Context(), "killed", "script", nil)
	if err != nil {
		t.Fatal(err)
	}
	agent := scripted.Agent{Decisions: []driver.Action{scripted.Call("local__hang", `{"text":"w"}`)}}
	if err := d.Drive(t.Context(), r, agent); err != nil {
		t.Fatal(err)
	}
	v := r.View()
	if v.Run.Status != projector.Waiting || v.Run.Reason != driver.InterruptedSideEffect {
		t.Fatalf("status %s %q, want waiting on %s", v.Run.Status, v.Run.Reason, driver.InterruptedSideEffect)
	}
	if a := v.PendingApproval(); a == nil || a.Step != 1 || a.Origin != events.OriginRecovery {
		t.Errorf("pending approval: got %+v, want recovery's for step 1", a)
	}
	if o := observations(t, log, "killed", 1); len(o) != 0 {
		t.Errorf("observations of the killed call: got %+v, want none", o)
	}
}

// A grant is bound to the pin: the server changes only the tool's
// annotations (nothing else of the recorded spec: not its description,
// schema or class), it is pinned again, and the grant given under the old
// pin is not consumed: the write asks for a new approval.
func TestDriver_GrantIsBoundToThePin(t *testing.T) {
	srv := newServer()
	var calls int
	var mu sync.Mutex
	write := func(ann *sdk.ToolAnnotations) {
		srv.AddTool(&sdk.Tool{Name: "write", Description: "Write it.", InputSchema: json.RawMessage(objSchema), Annotations: ann},
			func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
				mu.Lock()
				calls++
				mu.Unlock()
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "written"}}}, nil
			})
	}
	write(nil)
	cfg := mcp.Config{Lock: "unused", Servers: []mcp.ServerConfig{{Name: "web", URL: httpServer(t, srv, nil),
		Tools: map[string]mcp.ToolConfig{"write": {Class: events.Destructive}}}}}
	log := testkit.JetStream(t).Log(t, events.Config{})
	kp, ops := newOperator(t)
	d1 := worker(t, log, cfg, pin(t, cfg), ops)
	agent := scripted.Agent{Decisions: []driver.Action{scripted.Call("web__write", `{"text":"x"}`), scripted.Call("finish", `{}`)}}
	r, err := d1.Create(t.Context(), "bound", "script", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d1.Drive(t.Context(), r, agent); err != nil {
		t.Fatal(err)
	}
	first := grantPending(t, log, d1, "bound", kp)

	write(&sdk.ToolAnnotations{Title: "Write", DestructiveHint: ptr(true)})
	d2 := worker(t, log, cfg, pin(t, cfg), ops)
	r2, err := d2.Load(t.Context(), "bound")
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Drive(t.Context(), r2, agent); err != nil {
		t.Fatal(err)
	}
	v := r2.View()
	var specs []events.ToolSpec
	for _, d := range []*driver.Driver{d1, d2} {
		for _, s := range d.Tools() {
			if s.Name == "web__write" {
				specs = append(specs, s)
			}
		}
	}
	if specs[0].Description != specs[1].Description || string(specs[0].Schema) != string(specs[1].Schema) || specs[0].SideEffect != specs[1].SideEffect {
		t.Fatalf("the two specs differ in more than their pins: %+v, %+v", specs[0], specs[1])
	}
	a := v.PendingApproval()
	if v.Run.Status != projector.Waiting || a == nil || a.ID == first.ID || a.Hash == first.Hash {
		t.Fatalf("after the re-pin: status %s, pending %+v; want a new approval, not the old grant consumed", v.Run.Status, a)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 0 {
		t.Errorf("write called %d times, want 0", calls)
	}
}
