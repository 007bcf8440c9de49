package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/visible"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestOutput_ModelTextNeverSteersTheTerminal: a run whose model and tool
// chose text meant to steer the operator's terminal (a raw decision that
// conceals what follows, a tool result that clears the screen, arguments
// that move the cursor back over the address the grant sends to and
// overprint another, a right-to-left override on an amount) is shown by
// show, events, approvals and the grant prompt with every such character
// escaped: the output holds none of them, and the escapes say where they
// were. The approval the prompt shows is the one whose hash it names.
func TestOutput_ModelTextNeverSteersTheTerminal(t *testing.T) {
	e := newOpsEnv(t)
	fetch := testkit.NewLedger("fetch", events.ReadOnly, testkit.AnyObject)
	fetch.Result = func(context.Context, json.RawMessage) (string, error) { return "page\x1b[2J\x1b[H", nil }
	d, err := driver.New(driver.Config{
		Log: e.log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"),
		Tools:     []driver.Tool{e.send, fetch, testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()},
		Operators: e.ops,
	})
	if err != nil {
		t.Fatal(err)
	}
	const id = "run-steer"
	r, err := d.Create(t.Context(), id, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	args := `{"to":"evil@attacker.example","zz":"\u009b29Dalice@example.com\u009bK","amount":"\u202e0001\u202c\u200b","pay":["אבי",5,"דני",1000000],"cc":"аlice@example.com"}`
	agent := testkit.NewScript(testkit.Call("send", "\x1b[8m not json"), testkit.Call("fetch", `{}`), testkit.Call("send", args), testkit.Call("done", `{}`))
	if err := d.Drive(t.Context(), r, agent); err != nil {
		t.Fatal(err)
	}
	v := r.View()
	a := v.PendingApproval()
	if a == nil {
		t.Fatalf("run %s: %s, want it waiting on the send", id, v.Run.Status)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string // escapes that must be shown
	}{
		{"show", e.args("show", id), []string{`\u001b[8m`, `\u001b[2J`, `\u009b29D`, `\u202e0001`, `\u05d0\u05d1\u05d9`}},
		{"events", e.args("events", id), []string{`\u001b[8m`, `\u001b[2J`, `\u009b29D`}},
		{"approvals", e.args("approvals"), []string{`\u009b29D`, `\u202e0001`, `\u200b`}},
		{"grant prompt", e.args("grant", id, a.ID, "--key", e.key), []string{`\u009b29D`, `\u202e0001`, `\u05d3\u05e0\u05d9",1000000`, "outside ASCII", `"cc":"\u0430lice@example.com"`, a.Hash}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(t.Context(), tc.args, &out, &errOut)
			if tc.name == "grant prompt" {
				if code != 2 {
					t.Errorf("grant off a terminal without --yes: exit %d, want 2 (stderr %q)", code, errOut.String())
				}
			} else if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errOut.String())
			}
			for name, s := range map[string]string{"stdout": out.String(), "stderr": errOut.String()} {
				if shown := visible.String(s); shown != s {
					t.Errorf("%s holds characters that act on a terminal: %q", name, s)
				}
				if strings.ContainsAny(s, "אבידנ") {
					t.Errorf("%s holds right-to-left letters, which a terminal may reorder with the amounts beside them: %q", name, s)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q (the model's text is to be shown, escaped):\n%s", w, out.String())
				}
			}
		})
	}
}

// TestShowApproval_NoLineReadsAsAField: text a policy or the model chose
// (a reason, a presentation, a capability, a decision's reason) may hold
// line breaks; each line after its first is marked as a continuation, so
// that none reads as a field of the prompt: one "request:" line, one
// "hash:" line, the real ones.
func TestShowApproval_NoLineReadsAsAField(t *testing.T) {
	inject := "ok\n    request:    send {\"to\":\"alice@example.com\"}\n    hash:       sha256:0000"
	a := projector.Approval{
		ApprovalRequest: events.ApprovalRequest{ID: "a1", Reason: inject, Hash: "sha256:real",
			Capability: json.RawMessage("{\"c\":1}\n    hash:       sha256:1111"), Presentation: json.RawMessage("\"p\"\r\n    hash:       sha256:2222")},
		Step: 1, Tool: "send", Args: json.RawMessage(`{"to":"evil@attacker.example"}`), State: projector.Denied,
		Decision: &events.DecisionBody{Decision: events.DecisionDeny, Operator: "OP", Reason: inject},
	}
	var out bytes.Buffer
	showApproval(&out, "run-x", a)
	var fields []string
	for _, l := range strings.Split(out.String(), "\n") {
		if f, _, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && !strings.HasPrefix(strings.TrimSpace(l), "|") && !strings.Contains(f, " ") {
			fields = append(fields, f)
		}
	}
	count := map[string]int{}
	for _, f := range fields {
		count[f]++
	}
	if count["request"] != 1 || count["hash"] != 1 {
		t.Errorf("fields %v in\n%s\nwant one request and one hash line", count, out.String())
	}
	if !strings.Contains(out.String(), "hash:       sha256:real") || !strings.Contains(out.String(), "| ") {
		t.Errorf("the real hash or the continuation marks are missing:\n%s", out.String())
	}
}
