package testkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// Refused is the expected outcome of a [PolicyCase] whose request the
// runtime's own checks refuse: an unknown tool, arguments that are not one
// usable JSON value, or arguments the tool's schema rejects. Such a request
// never reaches the policy.
const Refused events.Outcome = "refused"

// PolicyCase is one row of a policy table for [CheckPolicy].
type PolicyCase struct {
	Name string
	// Tool names the tool asked for.
	Tool string
	// Args are the raw argument bytes as the agent would send them,
	// malformed or not.
	Args string
	// View is the run the policy is handed; nil means a fresh RUNNING run
	// with the tools recorded.
	View *projector.View
	// Want is one of the four outcomes, or [Refused].
	Want events.Outcome
	// Kind, for Want require_approval, is the approval kind expected; ""
	// does not check it.
	Kind string
}

// checkRun is the run id CheckPolicy hands the policy, and the id of the
// view it makes when a case has none.
const checkRun = "checkpolicy"

// CheckPolicy decides every case the way the driver decides a step, and
// fails t with one table of the cases whose outcome is not the one wanted.
//
// Each tool is compiled once with [driver.Compile]; a tool that does not
// compile, or two tools with one name, fail t at once. A case naming no tool
// is [Refused]; so is one whose Args [driver.CompiledTool.CheckArgs] refuses (the
// JSON boundary, then the schema), and the policy is not called for it.
// Otherwise p.Evaluate is handed a request for step 1 of run "checkpolicy"
// with the arguments in PolicyJSON form, and a copy of the case's view.
//
// An Evaluate error, an outcome outside the four, or a require_approval the
// runtime could not record (no kind, or capability or presentation that is
// not usable JSON) is a disagreement whatever was wanted: the runtime fails
// the run on it.
func CheckPolicy(t testing.TB, p policy.Policy, tools []driver.Tool, cases []PolicyCase) {
	t.Helper()
	if p == nil {
		t.Fatalf("testkit.CheckPolicy: nil policy")
		return
	}
	set, err := compileTools(tools)
	if err != nil {
		t.Fatalf("testkit.CheckPolicy: %v", err)
		return
	}
	fresh := freshView(checkRun, set.records)
	var tab table
	for i, c := range cases {
		name := c.Name
		if name == "" {
			name = fmt.Sprintf("#%d", i)
		}
		if detail := c.malformed(); detail != "" {
			tab.add(name, c.Tool, c.want(), "-", detail)
			continue
		}
		view := fresh
		if c.View != nil {
			view = *c.View
		}
		got, kind, detail := set.decide(t.Context(), p, c.Tool, []byte(c.Args), checkRun, view)
		switch {
		case got != c.Want:
		case got == events.RequireApproval && c.Kind != "" && kind != c.Kind:
		default:
			continue
		}
		tab.add(name, c.Tool, c.want(), gotOutcome(got, kind), detail)
	}
	if tab.len() > 0 {
		t.Errorf("testkit.CheckPolicy: %d of %d cases disagree:\n%s", tab.len(), len(cases), tab.render("case", "tool", "want", "got", "detail"))
	}
}

// malformed says what is wrong with the case itself, or "".
func (c PolicyCase) malformed() string {
	switch {
	case c.Want != Refused && !c.Want.Valid():
		return fmt.Sprintf("the case wants %q (want one of allow, deny, abort, require_approval, refused)", c.Want)
	case c.Kind != "" && c.Want != events.RequireApproval:
		return fmt.Sprintf("the case names approval kind %q but wants %s (a kind is only checked for require_approval)", c.Kind, c.Want)
	}
	return ""
}

func (c PolicyCase) want() string {
	if c.Kind != "" {
		return gotOutcome(c.Want, c.Kind)
	}
	return string(c.Want)
}

func gotOutcome(o events.Outcome, kind string) string {
	if o == events.RequireApproval && kind != "" {
		return fmt.Sprintf("%s (kind %s)", o, kind)
	}
	return string(o)
}

// undecided is the outcome shown for a request the runtime would fail the
// run on: the policy returned an error or a decision it cannot act on.
const undecided events.Outcome = "internal_error"

// toolSet is a set of compiled tools, by name and in order.
type toolSet struct {
	byName  map[string]*driver.CompiledTool
	order   []*driver.CompiledTool
	records []events.ToolSpec
}

// compileTools compiles each tool once, refusing two with one name as the
// driver does.
func compileTools(tools []driver.Tool) (*toolSet, error) {
	set := &toolSet{byName: map[string]*driver.CompiledTool{}}
	for _, tl := range tools {
		ct, err := driver.Compile(tl)
		if err != nil {
			return nil, err
		}
		if set.byName[ct.Spec.Name] != nil {
			return nil, fmt.Errorf("%w %q: given twice", driver.ErrBadTool, ct.Spec.Name)
		}
		set.byName[ct.Spec.Name] = ct
		set.order = append(set.order, ct)
		set.records = append(set.records, ct.Record)
	}
	return set, nil
}

func (s *toolSet) names() string {
	names := make([]string, len(s.order))
	for i, ct := range s.order {
		names[i] = ct.Spec.Name
	}
	return strings.Join(names, ", ")
}

// freshView is a RUNNING run with no steps yet and tools recorded, as a
// run.created event folds.
func freshView(run string, tools []events.ToolSpec) projector.View {
	return projector.View{Run: projector.Run{ID: run, Status: projector.Running, Tools: tools, Events: 1}}
}

// decide applies the driver's acceptance to a request and, if it passes,
// asks p. It returns the outcome as the runtime would act on it ([Refused]
// or [undecided] included), the approval kind for require_approval, and a
// detail a person can read: why it was refused, what went wrong, or the
// policy's reason.
func (s *toolSet) decide(ctx context.Context, p policy.Policy, tool string, raw []byte, run string, view projector.View) (events.Outcome, string, string) {
	ct := s.byName[tool]
	if ct == nil {
		return Refused, "", fmt.Sprintf("no tool named %q (tools: %s)", tool, s.names())
	}
	args, err := ct.CheckArgs(raw)
	if err != nil {
		var ae *driver.ArgsError
		if errors.As(err, &ae) && ae.Malformed() {
			return Refused, "", fmt.Sprintf("malformed: %v", err)
		}
		return Refused, "", err.Error()
	}
	return evaluate(ctx, p, policy.Request{Run: run, Step: 1, Tool: ct.Record, Args: args}, view)
}

// evaluate asks p about an accepted request as the runtime does
// ([policy.Ask]) and holds its answer to what the driver can act on.
func evaluate(ctx context.Context, p policy.Policy, req policy.Request, view projector.View) (events.Outcome, string, string) {
	v := policy.Ask(ctx, p, req, view)
	if v.Err != nil {
		return undecided, "", v.Err.Error()
	}
	detail := ""
	if v.Reason != "" {
		detail = "reason: " + v.Reason
	}
	if v.Approval != nil {
		return v.Outcome, v.Approval.Kind, detail
	}
	return v.Outcome, "", detail
}

// table collects rows and renders them aligned, for one report.
type table struct{ rows [][]string }

func (t *table) add(cells ...string) {
	for i, c := range cells {
		cells[i] = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, c)
	}
	t.rows = append(t.rows, cells)
}

func (t *table) len() int { return len(t.rows) }

func (t *table) render(header ...string) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
	return strings.TrimRight(b.String(), "\n")
}
