package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// scribble overwrites b in place with a JSON string of the same length, so
// that a leak shows up as changed data rather than as a failure to encode.
func scribble(b []byte) {
	if len(b) < 2 {
		for i := range b {
			b[i] = '0'
		}
		return
	}
	b[0], b[len(b)-1] = '"', '"'
	for i := 1; i < len(b)-1; i++ {
		b[i] = 'X'
	}
}

// scribbleTools writes through every spec in ts.
func scribbleTools(ts []events.ToolSpec) {
	for i := range ts {
		scribble(ts[i].Schema)
		ts[i].Name, ts[i].Hash, ts[i].SideEffect, ts[i].Terminal = "hacked", "hacked", events.ReadOnly, true
	}
}

// scribbleRun writes through a run row.
func scribbleRun(r *projector.Run) {
	scribble(r.Input)
	scribbleTools(r.Tools)
	r.ID, r.Status, r.Reason, r.Steps, r.FailuresInRow, r.Repeats = "hacked", projector.Completed, "hacked", 999, 999, 999
	r.Limits = events.Limits{}
}

// scribbleSteps writes through every step it can reach and everything those
// point to, then replaces the sequence.
func scribbleSteps(steps *projector.Steps) {
	ss := steps.Slice()
	defer func() { *steps = projector.StepsOf(projector.Step{N: 1}) }()
	for i := range ss {
		s := &ss[i]
		s.Decision.Args, s.Decision.Tool = "hacked", "hacked"
		for j := range s.Decision.ArgsBytes {
			s.Decision.ArgsBytes[j] = 'X'
		}
		if s.Policy != nil {
			s.Policy.Outcome, s.Policy.Reason, s.Policy.Consumes = events.Allow, "hacked", "hacked"
			scribble(s.Policy.Args)
			if a := s.Policy.Approval; a != nil {
				scribble(a.Capability)
				scribble(a.Presentation)
				a.Hash, a.Kind = "hacked", "hacked"
			}
		}
		if s.Observation != nil {
			s.Observation.Kind, s.Observation.Content = events.ObsResult, "hacked"
		}
		if s.Interrupted != nil {
			s.Interrupted.Resolution = "hacked"
		}
	}
}

// scribbleApprovals writes through every approval.
func scribbleApprovals(as []projector.Approval) {
	for i := range as {
		a := &as[i]
		scribble(a.Capability)
		scribble(a.Presentation)
		a.Hash, a.Kind, a.State, a.ID = "hacked", "hacked", projector.Granted, "hacked"
		if a.ExpiresAt != nil {
			*a.ExpiresAt = time.Time{}
		}
		if a.Decision != nil {
			a.Decision.Signature, a.Decision.Hash, a.Decision.Decision = "hacked", "hacked", events.DecisionGrant
		}
	}
}

// scribbleView writes through everything in a view.
func scribbleView(v *projector.View) {
	scribbleRun(&v.Run)
	scribbleSteps(&v.Steps)
	scribbleApprovals(v.Approvals)
	v.Intake = 1 << 40
	for i := range v.Refusals {
		v.Refusals[i].Reason = "hacked"
	}
}

// expectedStep is what a step's decision and policy result must read as,
// whatever the consumers did.
type expectedStep struct {
	tool, args string
}

// consumerRun is the scenario both consumers take part in: a read, a
// malformed request kept as bytes, a remote call paused and granted, a read
// after it, and done.
var consumerSteps = []expectedStep{
	{"read_file", `{"path":"a"}`},
	{"read_file", "{\"path\":\"\xff\"}"},
	{"send", `{"to":"ops"}`},
	{"read_file", `{"path":"b"}`},
	{"done", `{}`},
}

// checkInput reports where a consumer's input differs from the run as
// recorded: every step so far reads as it was decided, and every tool spec
// as the driver compiled it.
func checkInput(t *testing.T, who string, seq projector.Steps, tools []events.ToolSpec, want []events.ToolSpec) {
	t.Helper()
	for i, s := range seq.Slice() {
		w := consumerSteps[i]
		if s.Decision.Tool != w.tool || string(s.Decision.RawArgs()) != w.args {
			t.Errorf("%s sees step %d as %s %q, want %s %q", who, s.N, s.Decision.Tool, s.Decision.RawArgs(), w.tool, w.args)
		}
		if s.Observation != nil && s.Observation.Content == "hacked" {
			t.Errorf("%s sees step %d's observation as written by the other consumer", who, s.N)
		}
		if s.Policy != nil && strings.Contains(string(s.Policy.Args), "XX") {
			t.Errorf("%s sees step %d's policy args as %s", who, s.N, s.Policy.Args)
		}
	}
	if !reflect.DeepEqual(tools, want) {
		t.Errorf("%s sees tools %s, want %s", who, specsString(tools), specsString(want))
	}
}

func TestDriver_ConsumersCannotCorruptEachOther(t *testing.T) {
	// run drives the scenario with the given agent and policy behaviour and
	// checks the log, the driver's view and the driver's tools after it.
	run := func(t *testing.T, agentWrites, policyWrites func(*driver.StepInput, *policy.Request, *projector.View)) {
		t.Helper()
		env := testkit.JetStream(t)
		log := env.Log(t, events.Config{})
		read := testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
		send := testkit.NewLedger("send", events.RemoteMutation, toSchema)
		kp, ops := operator(t)

		var snapshot []events.ToolSpec // the driver's tools as compiled, before anyone wrote
		pol := policyFunc(func(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
			checkInput(t, "policy", v.Steps, v.Run.Tools, snapshot)
			if want := specByName(snapshot, consumerSteps[req.Step-1].tool); !reflect.DeepEqual(req.Tool, want) {
				t.Errorf("policy asked with tool %s, want %s", specsString([]events.ToolSpec{req.Tool}), specsString([]events.ToolSpec{want}))
			}
			if w := consumerSteps[req.Step-1]; string(req.Args) != string(canon(t, w.args)) {
				t.Errorf("policy asked with args %s, want %s", req.Args, canon(t, w.args))
			}
			d, err := policy.DefaultSideEffects().Evaluate(ctx, req, v)
			if policyWrites != nil {
				policyWrites(nil, &req, &v)
			}
			return d, err
		})
		d := newDriverCfg(t, driver.Config{Log: log, Policy: pol, Tools: []driver.Tool{read, send, done()}, Operators: ops})
		snapshot = cloneSpecs(d.Tools())

		agent := driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
			checkInput(t, "agent", in.Steps, in.Tools, snapshot)
			checkInput(t, "agent's run row", in.Steps, in.Run.Tools, snapshot)
			if in.Run.ID != "shared" || in.Run.Status != projector.Running {
				t.Errorf("agent sees run %s %s, want shared RUNNING", in.Run.ID, in.Run.Status)
			}
			n := in.Steps.Len()
			if agentWrites != nil {
				agentWrites(&in, nil, nil)
			}
			w := consumerSteps[n]
			return driver.Action{Tool: w.tool, Args: json.RawMessage(w.args)}, nil
		})

		r := create(t, d, "shared")
		drive(t, d, r, agent)
		wantEnd(t, r.View(), projector.Waiting, events.RemoteMutation)
		grant(t, d, r, kp)
		drive(t, d, r, agent)
		wantEnd(t, r.View(), projector.Completed, events.ReasonCompleted)

		// The log holds what was decided and allowed.
		recs := records(t, log, "shared")
		for i, rec := range ofKind(recs, events.StepDecided) {
			if got := string(body[events.StepDecidedBody](t, rec).RawArgs()); got != consumerSteps[i].args {
				t.Errorf("recorded step %d args: got %q, want %q", i+1, got, consumerSteps[i].args)
			}
		}
		for _, rec := range append(ofKind(recs, events.StepPolicy), ofKind(recs, events.ApprovalRequested)...) {
			b := body[events.PolicyBody](t, rec)
			if want := string(canon(t, consumerSteps[b.Step-1].args)); string(b.Args) != want {
				t.Errorf("recorded policy result of step %d: args %s, want %s", b.Step, b.Args, want)
			}
			if want := specByName(snapshot, consumerSteps[b.Step-1].tool).Hash; b.ToolHash != want {
				t.Errorf("recorded policy result of step %d: tool hash %s, want %s", b.Step, b.ToolHash, want)
			}
		}
		if got := body[events.RunCreatedBody](t, recs[0]).Tools; !reflect.DeepEqual(got, snapshot) {
			t.Errorf("recorded tools: got %s, want %s", specsString(got), specsString(snapshot))
		}
		// The tools ran with the arguments that were allowed.
		if calls := read.Calls(); len(calls) != 2 || string(calls[0]) != `{"path":"a"}` || string(calls[1]) != `{"path":"b"}` {
			t.Errorf("read_file executed with %q, want {\"path\":\"a\"} then {\"path\":\"b\"}", calls)
		}
		if calls := send.Calls(); len(calls) != 1 || string(calls[0]) != `{"to":"ops"}` {
			t.Errorf("send executed with %q, want once with {\"to\":\"ops\"}", calls)
		}
		// The driver's own view is the log's, and its tools are as compiled.
		if fresh := load(t, d, "shared"); !reflect.DeepEqual(r.View(), fresh.View()) {
			t.Errorf("driver's view differs from the log's:\n got %+v\nwant %+v", r.View(), fresh.View())
		}
		if got := d.Tools(); !reflect.DeepEqual(got, snapshot) {
			t.Errorf("driver's tools after the run: got %s, want %s", specsString(got), specsString(snapshot))
		}
		// A new run records the tools as compiled.
		next := create(t, d, "next")
		if got := next.View().Run.Tools; !reflect.DeepEqual(got, snapshot) {
			t.Errorf("a later run records tools %s, want %s", specsString(got), specsString(snapshot))
		}
	}

	t.Run("agent writes through its steps, approvals and run", func(t *testing.T) {
		run(t, func(in *driver.StepInput, _ *policy.Request, _ *projector.View) {
			scribbleRun(&in.Run)
			scribbleSteps(&in.Steps)
			scribbleApprovals(in.Approvals)
		}, nil)
	})
	t.Run("agent writes through its tool specs", func(t *testing.T) {
		run(t, func(in *driver.StepInput, _ *policy.Request, _ *projector.View) {
			scribbleTools(in.Tools)
		}, nil)
	})
	t.Run("policy writes through its view", func(t *testing.T) {
		run(t, nil, func(_ *driver.StepInput, _ *policy.Request, v *projector.View) {
			scribbleView(v)
		})
	})
	t.Run("policy writes through its request", func(t *testing.T) {
		run(t, nil, func(_ *driver.StepInput, req *policy.Request, _ *projector.View) {
			scribble(req.Args)
			scribble(req.Tool.Schema)
			req.Tool.Name, req.Tool.Hash, req.Run, req.Step = "hacked", "hacked", "hacked", 99
		})
	})
}

// specByName returns the spec named name in specs.
func specByName(specs []events.ToolSpec, name string) events.ToolSpec {
	for _, s := range specs {
		if s.Name == name {
			return s
		}
	}
	return events.ToolSpec{}
}

// cloneSpecs deep-copies specs.
func cloneSpecs(specs []events.ToolSpec) []events.ToolSpec {
	out := make([]events.ToolSpec, len(specs))
	for i, s := range specs {
		s.Schema = append(json.RawMessage(nil), s.Schema...)
		out[i] = s
	}
	return out
}

// specsString renders specs compactly for failure messages.
func specsString(specs []events.ToolSpec) string {
	var b strings.Builder
	for i, s := range specs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s(%s %s terminal=%v hash=%.12s)", s.Name, s.Schema, s.SideEffect, s.Terminal, s.Hash)
	}
	return "[" + b.String() + "]"
}
