package faulttest

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

// chatReply is a Chat Completions reply with tool calls (name, args) or,
// with none, text.
func chatReply(text string, calls ...[2]string) string {
	var tcs []string
	for i, c := range calls {
		args, _ := json.Marshal(c[1])
		tcs = append(tcs, fmt.Sprintf(`{"id":"call_%d","type":"function","function":{"name":%q,"arguments":%s}}`, i+1, c[0], args))
	}
	msg, finish := `"content":null,"tool_calls":[`+strings.Join(tcs, ",")+`]`, "tool_calls"
	if len(calls) == 0 {
		b, _ := json.Marshal(text)
		msg, finish = `"content":`+string(b), "stop"
	}
	return `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant",` + msg + `},"finish_reason":"` + finish + `"}],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120}}`
}

// TestWorker_ModelSiblingsSurviveSIGKILL: a model's one reply with three
// tool calls, the second needing approval, is driven by real worker
// processes killed between the siblings: before the second is decided,
// and (after the grant) before the third. Each sibling executes once, in
// order, and the model is asked once for them and once after.
func TestWorker_ModelSiblingsSurviveSIGKILL(t *testing.T) {
	bin := workerBinary(t)
	ctx := t.Context()
	dir := t.TempDir()
	env, err := newProcEnv(ctx, dir, events.ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.close)
	srv := testkit.NewModelServer(t,
		testkit.ModelReply{Body: chatReply("",
			[2]string{"read_file", `{"path":"notes.txt"}`},
			[2]string{"send_email", `{"to":"ops@example.com","body":"the deploy is done"}`},
			[2]string{"read_file", `{"path": "notes.txt"}`})},
		testkit.ModelReply{Body: chatReply("Told ops.")})
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	cfg := "sandbox: " + strconv.Quote(env.sandbox) + "\n" + toolsYAML(events.ReadOnly) + `policy:
  id: model crash test
  side_effects: {read_only: allow, local_mutation: allow, remote_mutation: require_approval, destructive: deny}
models:
  m:
    provider: openai
    base_url: ` + srv.URL + `/v1
    model: m
    backoff: 1ms
`
	if err := os.WriteFile(env.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := env.q.Start(ctx, env.d, "run-m", "m", json.RawMessage(`"Tell ops the deploy is done."`)); err != nil {
		t.Fatal(err)
	}
	start := func(crash string) *proc {
		p, err := env.startWorker(bin, workerOpts{crashBefore: crash, concurrency: 1, args: []string{"--operator", pub}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.stop)
		return p
	}
	died := func(p *proc, what string) {
		t.Helper()
		if err := p.wait(30 * time.Second); !killedBy(err, syscall.SIGKILL) {
			t.Fatalf("%s: got %v, want death by SIGKILL\n%s\n%s", what, err, p.tail(3000), trace(ctx, env.log, "run-m"))
		}
	}
	view := func() projector.View {
		t.Helper()
		r, err := env.d.Load(ctx, "run-m")
		if err != nil {
			t.Fatal(err)
		}
		return r.View()
	}

	died(start("step.decided:2"), "worker 1, before the second sibling")
	if v := view(); v.Run.Steps != 1 || v.Step(1).Observation == nil || len(srv.Requests()) != 1 {
		t.Fatalf("after worker 1: %d steps, %d requests, want 1 observed step and 1 request%s", v.Run.Steps, len(srv.Requests()), trace(ctx, env.log, "run-m"))
	}

	w2 := start("step.decided:2")
	if err := waitSettled(ctx, env.d, []string{"run-m"}, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, w2.tail(3000))
	}
	v := view()
	a := v.PendingApproval()
	if v.Run.Status != projector.Waiting || a == nil || v.Step(2).Decision.Tool != "send_email" {
		t.Fatalf("worker 2: %s with step 2 %s, want waiting on send_email%s", v.Run.Status, v.Step(2).Decision.Tool, trace(ctx, env.log, "run-m"))
	}
	if d, err := client.New(env.log, env.q).Grant(ctx, kp, "run-m", a.ID, "ok to send"); err != nil || d.Unnudged != nil {
		t.Fatalf("grant: %+v, %v", d, err)
	}
	died(w2, "worker 2, before the third sibling")

	w3 := start("")
	if err := waitSettled(ctx, env.d, []string{"run-m"}, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, w3.tail(3000))
	}
	v = view()
	if v.Run.Status != projector.Completed || v.Run.Result != "Told ops." {
		t.Fatalf("run %s %s %q, want completed with the answer%s", v.Run.Status, v.Run.Reason, v.Run.Result, trace(ctx, env.log, "run-m"))
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2 (the three siblings came from one)", n)
	}
	var got []string
	for s := range v.Steps.All() {
		got = append(got, s.Decision.CallID+" "+s.Decision.Tool)
	}
	if want := "call_1 read_file,call_2 send_email,call_3 read_file"; strings.Join(got, ",") != want {
		t.Errorf("steps %v, want %s", got, want)
	}
	if s := v.Step(3); s.Decision.Args != `{"path": "notes.txt"}` {
		t.Errorf("step 3 args %q, want the model's bytes", s.Decision.Args)
	}
	ledger, err := readLedger(env.sandbox)
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	for _, l := range ledger {
		ran = append(ran, fmt.Sprintf("%d %s", l.Step, l.Tool))
	}
	if want := "1 read_file,2 send_email,3 read_file"; strings.Join(ran, ",") != want {
		t.Errorf("ledger %v, want each sibling once, in order: %s", ran, want)
	}
}
