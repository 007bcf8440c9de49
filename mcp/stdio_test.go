package mcp_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/mcp"
)

// A stdio server killed (SIGKILL) in the middle of a call: the call is
// interrupted, calls while it is down fail without being sent, and it is
// restarted.
func TestTool_StdioServerKilledMidCall(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	sc := stdioServer(t, "local", map[string]string{"ARBITER_MCP_PID_FILE": pidFile})
	sc.Tools = map[string]mcp.ToolConfig{"echo": {Class: events.ReadOnly}, "hang": {Class: events.LocalMutation}}
	cfg := mcp.Config{Lock: "unused", Servers: []mcp.ServerConfig{sc}}
	// A long first backoff, so the test sees the server down before it is
	// back.
	s := connect(t, cfg, pin(t, cfg), mcp.Options{MinBackoff: 300 * time.Millisecond, MaxBackoff: time.Second})
	echo, hang := tool(t, s, "local__echo"), tool(t, s, "local__hang")
	if out, err := call(t, echo, `{"text":"up"}`); err != nil || out != "echo: up" {
		t.Fatalf("echo: got %q, %v", out, err)
	}

	errc := make(chan error, 1)
	go func() {
		_, err := call(t, hang, `{"text":"w"}`)
		errc <- err
	}()
	pid := waitPID(t, pidFile)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, driver.ErrInterrupted) {
			t.Errorf("call cut by SIGKILL: got %v, want ErrInterrupted", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not end after its server was killed")
	}
	if _, err := call(t, echo, `{"text":"down"}`); !errors.Is(err, mcp.ErrUnavailable) {
		t.Errorf("call while the server is down: got %v, want ErrUnavailable", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := call(t, echo, `{"text":"back"}`)
		if err == nil && out == "echo: back" {
			break
		}
		if !errors.Is(err, mcp.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("after the restart: got %q, %v", out, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitPID reads the pid the hang tool writes once its call has begun.
func waitPID(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			pid, err := strconv.Atoi(string(b))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the hang tool never started")
	return 0
}
