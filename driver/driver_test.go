package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

func TestNew_RejectsBadTools(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	tool := func(name string, edit func(*testkit.Ledger)) *testkit.Ledger {
		l := testkit.NewLedger(name, events.ReadOnly, pathSchema)
		if edit != nil {
			edit(l)
		}
		return l
	}
	cases := []struct {
		name  string
		bad   string // the tool the error must name
		tools []driver.Tool
	}{
		{"no schema", "schemaless", []driver.Tool{tool("schemaless", func(l *testkit.Ledger) { l.S.Schema = nil })}},
		{"blank schema", "blank", []driver.Tool{tool("blank", func(l *testkit.Ledger) { l.S.Schema = json.RawMessage(" \n") })}},
		{"schema does not compile", "nope_type", []driver.Tool{tool("nope_type", func(l *testkit.Ledger) { l.S.Schema = json.RawMessage(`{"type":"nope"}`) })}},
		{"schema not JSON", "broken", []driver.Tool{tool("broken", func(l *testkit.Ledger) { l.S.Schema = json.RawMessage(`{"type":`) })}},
		{"schema with duplicate key", "twice", []driver.Tool{tool("twice", func(l *testkit.Ledger) {
			l.S.Schema = json.RawMessage(`{"type":"object","type":"string"}`)
		})}},
		{"unknown side-effect class", "sneaky", []driver.Tool{tool("sneaky", func(l *testkit.Ledger) { l.S.SideEffect = "harmless" })}},
		{"empty side-effect class", "classless", []driver.Tool{tool("classless", func(l *testkit.Ledger) { l.S.SideEffect = "" })}},
		{"duplicate name", "read_file", []driver.Tool{tool("read_file", nil), tool("read_file", nil)}},
		{"no timeout", "forever", []driver.Tool{tool("forever", func(l *testkit.Ledger) { l.S.Timeout = 0 })}},
		{"negative timeout", "backwards", []driver.Tool{tool("backwards", func(l *testkit.Ledger) { l.S.Timeout = -1 })}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A good tool beside the bad one does not save it.
			tools := append([]driver.Tool{tool("fine", nil)}, tc.tools...)
			d, err := driver.New(driver.Config{Log: log, Policy: allowAll, Tools: tools})
			if !errors.Is(err, driver.ErrBadTool) {
				t.Fatalf("New: got driver %v, err %v; want an error wrapping ErrBadTool", d, err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.bad)) {
				t.Errorf("New: error %q does not name tool %q", err, tc.bad)
			}
		})
	}
}

func TestNew_AcceptsEveryClassAndCompilesSchemas(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	schema := `{ "type": "object",
		"properties": { "b": {"type":"number"}, "a": {"type":"string"} } }`
	var tools []driver.Tool
	for _, c := range events.SideEffects {
		tools = append(tools, testkit.NewLedger("t_"+string(c), c, schema))
	}
	d := newDriver(t, log, allowAll, tools...)
	specs := d.Tools()
	if len(specs) != 4 {
		t.Fatalf("Tools: got %d specs, want 4", len(specs))
	}
	for _, s := range specs {
		if got, want := string(s.Schema), string(canon(t, schema)); got != want {
			t.Errorf("%s schema: got %s, want PolicyJSON %s", s.Name, got, want)
		}
		if got, want := s.Hash, driver.SpecHash(s); got != want {
			t.Errorf("%s hash: got %s, want %s", s.Name, got, want)
		}
	}
}

func TestNew_RejectsBadPolicyID(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	cases := []struct {
		name, id, named string
	}{
		{"over 256 bytes", strings.Repeat("v", policy.MaxIDLen+1), fmt.Sprintf("%.40q", strings.Repeat("v", policy.MaxIDLen+1))},
		{"multibyte over 256 bytes", strings.Repeat("é", 129), fmt.Sprintf("%.40q", strings.Repeat("é", 129))},
		{"invalid UTF-8", "rules \xff v1", fmt.Sprintf("%q", "rules \xff v1")},
		{"newline", "rules\nv1", fmt.Sprintf("%q", "rules\nv1")},
		{"NUL", "rules\x00v1", fmt.Sprintf("%q", "rules\x00v1")},
		{"C1 control", "rules\u0085v1", fmt.Sprintf("%q", "rules\u0085v1")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := driver.New(driver.Config{Log: log, Policy: policy.WithID(allowAll, tc.id), Tools: []driver.Tool{done()}})
			if !errors.Is(err, policy.ErrBadID) {
				t.Fatalf("New: got driver %v, err %v; want an error wrapping policy.ErrBadID", d, err)
			}
			if !strings.Contains(err.Error(), tc.named) {
				t.Errorf("New: error %q does not name the id as %s", err, tc.named)
			}
		})
	}
	t.Run("256 bytes is accepted", func(t *testing.T) {
		if _, err := driver.New(driver.Config{Log: log, Policy: policy.WithID(allowAll, strings.Repeat("v", policy.MaxIDLen)), Tools: []driver.Tool{done()}}); err != nil {
			t.Fatalf("New with a 256-byte id: %v", err)
		}
	})
	t.Run("no id is accepted", func(t *testing.T) {
		if _, err := driver.New(driver.Config{Log: log, Policy: allowAll, Tools: []driver.Tool{done()}}); err != nil {
			t.Fatalf("New with an unidentified policy: %v", err)
		}
	})
}

func TestDriver_CreateTwiceConflicts(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	d := newDriver(t, log, allowAll, done())
	create(t, d, "once")
	_, err := d.Create(t.Context(), "once", "test", nil)
	if !errors.Is(err, events.ErrConflict) {
		t.Fatalf("second Create: got %v, want an error wrapping events.ErrConflict", err)
	}
	if got := len(records(t, log, "once")); got != 1 {
		t.Errorf("events after a refused second create: got %d, want 1", got)
	}
}

func TestDriver_ConflictStopsDriving(t *testing.T) {
	t.Run("append of the decision", func(t *testing.T) {
		env := testkit.JetStream(t)
		log := env.Log(t, events.Config{})
		l1 := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
		l2 := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
		d1 := newDriver(t, log, allowAll, l1, done())
		d2 := newDriver(t, log, allowAll, l2, done())
		create(t, d1, "contended")
		r1 := load(t, d1, "contended")
		r2 := load(t, d2, "contended")
		before := r2.Tail()

		drive(t, d1, r1, testkit.NewScript(testkit.Call("read_file", `{"path":"a"}`), testkit.Call("done", `{}`)))
		wantEnd(t, r1.View(), projector.Completed, events.ReasonCompleted)

		err := d2.Drive(t.Context(), r2, testkit.NewScript(testkit.Call("read_file", `{"path":"b"}`)))
		if !errors.Is(err, events.ErrConflict) {
			t.Fatalf("Drive of a run another driver moved on: got %v, want an error wrapping events.ErrConflict", err)
		}
		wantCount(t, l1, 1)
		wantCount(t, l2, 0)
		if r2.Tail() != before {
			t.Errorf("run after a lost append: tail got %+v, want unchanged %+v", r2.Tail(), before)
		}
		if got, want := len(records(t, log, "contended")), int(r1.Tail().Count); got != want {
			t.Errorf("events in the log: got %d, want %d (the loser appended nothing)", got, want)
		}
	})

	t.Run("write-ahead allow", func(t *testing.T) {
		env := testkit.JetStream(t)
		log := env.Log(t, events.Config{})
		l := testkit.NewLedger("send_email", events.RemoteMutation, toSchema)
		// While the policy is deciding, another writer (here a worker
		// recording a refused decision) moves the run on: neither the
		// decision nor the allow it travels with may be recorded, and the
		// tool must not run.
		intruder := policyFunc(func(ctx context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
			appendEvent(t, log, req.Run, events.ApprovalRefused, events.RefusedBody{Approval: "none", Intake: 1, Reason: "no such approval"})
			return policy.Ruling{Outcome: events.Allow}, nil
		})
		d := newDriver(t, log, intruder, l)
		r := create(t, d, "raced")
		err := d.Drive(t.Context(), r, testkit.NewScript(testkit.Call("send_email", `{"to":"ops"}`)))
		if !errors.Is(err, events.ErrConflict) {
			t.Fatalf("Drive: got %v, want an error wrapping events.ErrConflict", err)
		}
		wantCount(t, l, 0)
		recs := records(t, log, "raced")
		if got := len(ofKind(recs, events.StepDecided)) + len(policyResults(t, recs)); got != 0 {
			t.Errorf("decisions and policy results after the lost race: got %d, want 0 (kinds %v)", got, kinds(recs))
		}

		// Reloaded, the run goes on: the step is evaluated again, and the
		// call runs once.
		calm := newDriver(t, log, allowAll, l, done())
		r = load(t, calm, "raced")
		drive(t, calm, r, testkit.NewScript(testkit.Call("send_email", `{"to":"ops"}`), testkit.Call("done", `{}`)))
		wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
		wantCount(t, l, 1)
		if got := len(r.View().Refusals); got != 1 {
			t.Errorf("refusals: got %d, want 1 (the stray decision)", got)
		}
	})
}

func TestDriver_ChangedToolSetIsRecorded(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	d1 := newDriver(t, log, allowAll, done())
	create(t, d1, "grown")
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	d2 := newDriver(t, log, allowAll, read, done())
	r := load(t, d2, "grown")
	drive(t, d2, r, testkit.NewScript(testkit.Call("read_file", `{"path":"a"}`), testkit.Call("done", `{}`)))

	recs := records(t, log, "grown")
	if got, want := recs[1].Event.Kind, events.RunTools; got != want {
		t.Fatalf("event 2: got %s, want %s before any step (kinds %v)", got, want, kinds(recs))
	}
	b := body[events.RunToolsBody](t, recs[1])
	if got, want := len(b.Tools), 2; got != want {
		t.Fatalf("recorded tools: got %d, want %d", got, want)
	}
	for i, s := range d2.Tools() {
		if b.Tools[i].Hash != s.Hash {
			t.Errorf("recorded tool %d: got hash %s, want %s", i, b.Tools[i].Hash, s.Hash)
		}
	}
	wantCount(t, read, 1)
	if got := len(ofKind(recs, events.RunTools)); got != 1 {
		t.Errorf("run.tools events: got %d, want 1", got)
	}
}

func TestDriver_LoadFromSnapshotEqualsLoad(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	d := newDriver(t, log, allowAll, read, done())
	r := create(t, d, "snap")
	drive(t, d, r, testkit.NewScript(testkit.Call("read_file", `{"path":"a"}`), testkit.Call("read_file", `{"path":"b"}`), testkit.Call("done", `{}`)))
	full := load(t, d, "snap")
	recs := records(t, log, "snap")

	for k := 1; k < len(recs); k++ {
		evs := make([]events.Event, k)
		for i := range evs {
			evs[i] = recs[i].Event
		}
		snap, err := projector.Fold(evs...)
		if err != nil {
			t.Fatalf("fold the first %d events: %v", k, err)
		}
		at := events.Tail{Seq: recs[k-1].StreamSeq, Count: recs[k-1].Event.Seq, Hash: events.Hash(recs[k-1].Data)}
		got, err := d.LoadFrom(t.Context(), "snap", snap, at)
		if err != nil {
			t.Fatalf("LoadFrom a snapshot of %d events: %v", k, err)
		}
		if got.Tail() != full.Tail() {
			t.Errorf("LoadFrom a snapshot of %d events: got tail %+v, want %+v", k, got.Tail(), full.Tail())
		}
		if !reflect.DeepEqual(got.View(), full.View()) {
			t.Errorf("LoadFrom a snapshot of %d events: got view %+v, want %+v", k, got.View().Run, full.View().Run)
		}
	}

	snap := r.View()
	at := events.Tail{Seq: recs[1].StreamSeq, Count: recs[1].Event.Seq, Hash: strings.Repeat("0", 64)}
	if _, err := d.LoadFrom(t.Context(), "snap", snap, at); !errors.Is(err, events.ErrBrokenChain) {
		t.Errorf("LoadFrom a snapshot that does not chain onto the log: got %v, want an error wrapping events.ErrBrokenChain", err)
	}
}

func TestDriver_ViewEqualsFreshLoad(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	send := testkit.NewLedger("send", events.RemoteMutation, `{"type":"object","properties":{"q":{"type":"string","pattern":"^[a-z&<> ]+$"}}}`)
	send.Result = func(context.Context, json.RawMessage) (string, error) { return "sent <b>&amp;</b>", nil }
	kp, ops := operator(t)
	d := newDriverCfg(t, driver.Config{Log: log, Policy: policy.DefaultSideEffects(), Tools: []driver.Tool{send, done()}, Operators: ops})
	r := create(t, d, "html")
	agent := testkit.NewScript(testkit.Call("send", `{"q":"a && b <c>"}`), testkit.Call("done", `{"note":"</script>"}`))
	drive(t, d, r, agent)
	if fresh := load(t, d, "html"); !reflect.DeepEqual(r.View(), fresh.View()) {
		t.Errorf("waiting run: the driver's view differs from a fresh load:\n got %+v\nwant %+v", r.View(), fresh.View())
	}
	grant(t, d, r, kp)
	drive(t, d, r, agent)
	wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)
	if fresh := load(t, d, "html"); !reflect.DeepEqual(r.View(), fresh.View()) {
		t.Errorf("completed run: the driver's view differs from a fresh load:\n got %+v\nwant %+v", r.View(), fresh.View())
	}
	if calls := send.Calls(); len(calls) != 1 || string(calls[0]) != `{"q":"a && b <c>"}` {
		t.Errorf("send executed with %q, want once with the PolicyJSON args", calls)
	}
}

// TestDriver_ViewEqualsFreshLoadWithInvalidUTF8: text that JSON cannot hold
// (invalid UTF-8 in a tool's result, a policy's reason, an agent's call id
// and reason, a failing agent's error) is recorded replaced, and the
// driver's own view is what a fresh load folds from the log, step by step.
func TestDriver_ViewEqualsFreshLoadWithInvalidUTF8(t *testing.T) {
	env := testkit.JetStream(t)
	log := env.Log(t, events.Config{})
	const bad = "ok \xff\xfe end"
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	read.Result = func(context.Context, json.RawMessage) (string, error) { return "result " + bad, nil }
	p := policyFunc(func(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
		if req.Step == 2 {
			return policy.Ruling{Outcome: events.Deny, Reason: "no " + bad}, nil
		}
		return policy.Ruling{Outcome: events.Allow, Reason: "fine " + bad}, nil
	})
	d := newDriverCfg(t, driver.Config{Log: log, Policy: p, Tools: []driver.Tool{read}})
	r := create(t, d, "utf8")
	steps := []driver.Action{
		{Tool: "read", Args: json.RawMessage(`{}`), CallID: "c\xff1", Reason: "why " + bad},
		{Tool: "read", Args: json.RawMessage(`{"n":2}`), CallID: "c2"},
	}
	agent := driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
		if n := in.Steps.Len(); n < len(steps) {
			return steps[n], nil
		}
		return driver.Action{}, errors.New("agent gave up " + bad)
	})
	drive(t, d, r, agent)
	fresh := load(t, d, "utf8")
	if !reflect.DeepEqual(r.View(), fresh.View()) {
		t.Errorf("the driver's view differs from a fresh load:\n got %+v\nwant %+v", r.View(), fresh.View())
	}
	v := fresh.View()
	if s := v.Steps.At(0); !utf8.ValidString(s.Observation.Content) || !strings.HasPrefix(s.Observation.Content, "result ok ") {
		t.Errorf("recorded result %q, want valid UTF-8 with the text kept", s.Observation.Content)
	}
	wantEnd(t, v, projector.Failed, events.ReasonAgentError)
}
