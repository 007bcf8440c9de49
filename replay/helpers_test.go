package replay_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/arbiter-run/arbiter/testkit"
)

var update = flag.Bool("update", false, "re-record testdata/runs/*.jsonl by driving real runs, and rewrite the golden reports")

// report is what a check reported, in the order it reported it.
type report struct {
	results []replay.Result
	grants  []replay.GrantResult
	lines   []string
	sum     replay.Summary
}

// check runs replay.Audit and collects what it reports.
func check(t *testing.T, log *events.Log, p policy.Policy, sel replay.Selection, opts replay.Options) report {
	t.Helper()
	var r report
	opts.OnGrant = func(g replay.GrantResult) error {
		r.grants = append(r.grants, g)
		r.lines = append(r.lines, grantLine(g))
		return nil
	}
	sum, err := replay.Audit(t.Context(), log, p, sel, opts, func(res replay.Result) error {
		r.results = append(r.results, res)
		r.lines = append(r.lines, resultLine(res))
		return nil
	})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	r.sum = sum
	return r
}

func decisionText(d replay.Ruling) string {
	s := string(d.Outcome)
	if d.Approval != nil {
		s += fmt.Sprintf("(%s %.8s)", d.Approval.Kind, d.Approval.Hash)
	}
	return s + fmt.Sprintf(" %q", d.Reason)
}

func resultLine(r replay.Result) string {
	s := fmt.Sprintf("%s #%d @%d %s %s: %s", r.Run, r.Step, r.StreamSeq, r.Tool, r.Kind, decisionText(r.Recorded))
	if r.Consumes != "" {
		s += " consuming " + r.Consumes
	}
	if r.Replayed != nil {
		s += " -> " + decisionText(*r.Replayed)
	}
	s += ": " + string(r.Verdict)
	if r.Change != "" {
		s += " " + string(r.Change)
	}
	if r.Cause != "" {
		s += fmt.Sprintf(" %s (%s)", r.Cause, r.Reason)
	}
	if r.GrantProblem != "" {
		s += " ran on a bad grant: " + r.GrantProblem
	}
	if r.Unconfirmed {
		s += " unconfirmed"
	}
	return s
}

func grantLine(g replay.GrantResult) string {
	s := fmt.Sprintf("%s %s @%d approval %s (#%d %s) by %.8s: %s", g.Decision, g.Run, g.StreamSeq, g.Approval, g.Step, g.Tool, g.Operator, g.Verdict)
	if g.Reason != "" {
		s += " (" + g.Reason + ")"
	}
	return s
}

func (r report) text() string {
	sum, _ := json.MarshalIndent(r.sum, "", "  ")
	return strings.Join(r.lines, "\n") + "\nsummary " + string(sum) + "\n"
}

// evaluation is a recorded policy evaluation as the fixture holds it.
type evaluation struct {
	run   string
	step  int
	seq   uint64
	tool  string
	class events.SideEffect // side-effect class of the tool called
	kind  events.Kind
	body  events.PolicyBody
}

// evaluations lists the fixture's recorded evaluations, straight from its
// lines, independently of replay.
func evaluations(t *testing.T, lines [][]byte) []evaluation {
	t.Helper()
	var out []evaluation
	specs := map[string]events.ToolSpec{}
	for i, line := range lines {
		e, err := events.Decode(line)
		if err != nil {
			t.Fatal(err)
		}
		switch e.Kind {
		case events.RunCreated:
			b, _ := events.DecodeBody[events.RunCreatedBody](e)
			for _, s := range b.Tools {
				specs[s.Hash] = s
			}
		}
		if b, ok, _ := events.PolicyResult(e); ok {
			s := specs[b.ToolHash]
			out = append(out, evaluation{run: e.Run, step: b.Step, seq: uint64(i + 1), tool: s.Name, class: s.SideEffect, kind: e.Kind, body: b})
		}
	}
	return out
}

func baseline() policy.IdentifiedPolicy {
	return policy.WithID(policy.DefaultSideEffects(), baselineID)
}

func operators(t *testing.T, ns ...byte) approvals.Operators {
	t.Helper()
	ops := approvals.Operators{}
	for _, n := range ns {
		_, pub := operatorKey(t, n)
		ops[pub] = fmt.Sprintf("operator %d", n)
	}
	return ops
}

// changed returns the baseline mapping with class mapped to o, under a new
// id, and the options that compare it with the baseline.
func changed(class events.SideEffect, o events.Outcome) (policy.Policy, replay.Options) {
	m := policy.DefaultSideEffects()
	m[class] = o
	return policy.WithID(m, "side-effects v2"), replay.Options{Baseline: baselineID}
}

// lineOf returns the index of the fixture line holding the first event of
// run of kind k whose body contains sub.
func lineOf(t *testing.T, lines [][]byte, run string, k events.Kind, sub string) int {
	t.Helper()
	for i, line := range lines {
		e, err := events.Decode(line)
		if err == nil && e.Run == run && e.Kind == k && bytes.Contains(e.Body, []byte(sub)) {
			return i
		}
	}
	t.Fatalf("no %s event of %s with %q", k, run, sub)
	return -1
}

func eventTime(t *testing.T, lines [][]byte, seq uint64) time.Time {
	t.Helper()
	e, err := events.Decode(lines[seq-1])
	if err != nil {
		t.Fatal(err)
	}
	return e.Time
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) { testkit.Golden(t, name, got, *update) }
