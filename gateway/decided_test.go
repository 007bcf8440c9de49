package gateway_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/gateway"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
)

// An operator's word on a waiting call reaches the session without the
// host making that call again: the status tool and any other call take it
// in, and an expiry is recorded when it passes. Each answer says what the
// host can do next.
func TestGateway_TheOperatorsWordReachesTheSessionWithoutTheSameCall(t *testing.T) {
	root, tools := upstream(t)
	target := filepath.Join(root, "w.txt")
	writeArgs := map[string]any{"path": target, "content": "one"}
	read := func(call func(string, any) (string, bool)) (string, bool) {
		return call("fs__read_text_file", map[string]any{"path": filepath.Join(root, "notes.txt")})
	}

	t.Run("denied", func(t *testing.T) {
		f := newFleet(t)
		cs := host(t, f.gateway(t, tools, "").Server())
		call := func(name string, args any) (string, bool) { return callTool(t, cs, name, args) }
		if out, _ := call("fs__write_file", writeArgs); !strings.HasPrefix(out, "WAITING FOR APPROVAL") {
			t.Fatalf("write: %q, want it waiting", out)
		}
		f.decide(t, status(t, cs), events.DecisionDeny)
		if st := status(t, cs); st.Status != string(projector.Cancelled) || len(st.Waiting) != 0 {
			t.Fatalf("status after the denial: %+v, want the run cancelled and nothing waiting", st)
		}
		out, isErr := read(call)
		if !isErr || !strings.Contains(out, "has ended") || !strings.Contains(out, "approval_denied") || !strings.Contains(out, "Start a new session") {
			t.Fatalf("read after the denial: %q (error %v), want the run ended by the denial", out, isErr)
		}
		wantNoFile(t, target)
	})

	t.Run("granted", func(t *testing.T) {
		f := newFleet(t)
		cs := host(t, f.gateway(t, tools, "").Server())
		call := func(name string, args any) (string, bool) { return callTool(t, cs, name, args) }
		call("fs__write_file", writeArgs)
		f.decide(t, status(t, cs), events.DecisionGrant)
		if st := status(t, cs); len(st.Waiting) != 1 || st.Waiting[0].State != string(projector.Granted) {
			t.Fatalf("status after the grant: %+v, want the write waiting, granted", st)
		}
		out, isErr := read(call)
		if isErr || !strings.HasPrefix(out, "NOT RUN") || !strings.Contains(out, "granted") || !strings.Contains(out, "make exactly that call again") {
			t.Fatalf("read after the grant: %q (error %v), want NOT RUN saying the write is granted", out, isErr)
		}
		wantNoFile(t, target)
		if out, isErr := call("fs__write_file", writeArgs); isErr || strings.HasPrefix(out, "NOT RUN") || strings.HasPrefix(out, "WAITING") {
			t.Fatalf("the granted write made again: %q (error %v), want it run", out, isErr)
		}
		if n := kindCount(t, f.log, status(t, cs).Run, events.StepObserved); n != 1 {
			t.Fatalf("observations: %d, want the granted write alone", n)
		}
	})

	t.Run("expired, nothing asked", func(t *testing.T) {
		f := newFleet(t)
		g, err := gateway.New(gateway.Config{
			Gate:  gate.Config{Log: f.log, Policy: writesNeedApproval, Operators: f.ops, ApprovalTTL: 300 * time.Millisecond},
			Tools: tools, Wait: 20 * time.Millisecond, Poll: 10 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		cs := host(t, g.Server())
		callTool(t, cs, "fs__write_file", writeArgs)
		run := status(t, cs).Run
		for deadline := time.Now().Add(10 * time.Second); kindCount(t, f.log, run, events.ApprovalExpired) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("waited 10s for the approval's expiry to be recorded")
			}
		}
		if st := status(t, cs); st.Status != string(projector.Cancelled) || len(st.Waiting) != 0 {
			t.Fatalf("status after the expiry: %+v, want the run cancelled", st)
		}
	})

	// A run named by the gateway's configuration is taken again by every
	// new session: once it ended, the answer says to configure another,
	// not to start a session that would take it again.
	t.Run("the configured run ended", func(t *testing.T) {
		f := newFleet(t)
		cs := host(t, f.gateway(t, tools, "desk").Server())
		call := func(name string, args any) (string, bool) { return callTool(t, cs, name, args) }
		call("fs__write_file", writeArgs)
		f.decide(t, status(t, cs), events.DecisionDeny)
		for i, c := range []func(string, any) (string, bool){call, func(name string, args any) (string, bool) {
			// The gateway restarted, as a desktop host restarts it.
			return callTool(t, host(t, f.gateway(t, tools, "desk").Server()), name, args)
		}} {
			out, isErr := read(c)
			if !isErr || !strings.Contains(out, "has ended") || !strings.Contains(out, "--run desk") || strings.Contains(out, "Start a new session") {
				t.Fatalf("read %d after the configured run ended: %q (error %v), want it to name --run", i, out, isErr)
			}
		}
	})
}

// With arbiter's NATS server away, a call is answered NOT RUN saying so,
// as an error result, and once it is back the same call runs.
func TestGateway_ACallWithTheLogAwayIsNotRunAndSaysWhy(t *testing.T) {
	root, tools := upstream(t)
	up := testkit.RestartableJetStream(t)
	nc, err := nats.Connect(up.Server().ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	f := newFleetOn(t, testkit.OnConn(t, up.Server(), nc).Log(t, events.Config{}))
	cs := host(t, f.gateway(t, tools, "").Server())
	args := map[string]any{"path": filepath.Join(root, "notes.txt")}
	if out, isErr := callTool(t, cs, "fs__read_text_file", args); out != "hello" || isErr {
		t.Fatalf("read: %q (error %v), want hello", out, isErr)
	}
	up.Stop()
	for deadline := time.Now().Add(10 * time.Second); nc.IsConnected(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the client still connected 10s after the server stopped")
		}
	}
	out, isErr := callTool(t, cs, "fs__read_text_file", args)
	if !isErr || !strings.HasPrefix(out, "NOT RUN: arbiter's event log is unreachable") {
		t.Fatalf("read with the log away: %q (error %v), want NOT RUN naming the log", out, isErr)
	}
	up.Start()
	for deadline := time.Now().Add(10 * time.Second); !nc.IsConnected(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no reconnect within 10s of the server's return")
		}
	}
	if out, isErr := callTool(t, cs, "fs__read_text_file", args); out != "hello" || isErr {
		t.Fatalf("read once the log is back: %q (error %v), want hello", out, isErr)
	}
}
