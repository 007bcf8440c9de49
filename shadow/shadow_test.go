package shadow_test

import (
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/shadow"
	"github.com/arbiter-run/arbiter/testkit"
)

// candidate is the refund limit with an allow default: it narrows refunds
// and widens a remote send the side-effect policy holds for an operator.
const candidate = `version: 1
default: allow
policies:
  - id: refund-too-large
    type: action_limit
    rules: [{id: too-large, action: deny, target: {type: tool, pattern: orders_refund}, condition: "args.amount >= 5000"}]
    enforcement: {mode: block}
  - id: refund-needs-manager
    type: confirmation_required
    rules: [{id: above-500, action: allow, target: {type: tool, pattern: orders_refund}, condition: "args.amount > 500"}]
    enforcement: {mode: confirm, approval_kind: manager}
`

// shadowed drives a run under the side-effect policy with the candidate in
// shadow, and returns the log and the run.
func shadowed(t *testing.T) (*events.Log, *driver.Run, *testkit.Ledger) {
	t.Helper()
	js := testkit.JetStream(t)
	log := js.Log(t, events.Config{})
	cand, err := rules.Parse("candidate.yaml", []byte(candidate))
	if err != nil {
		t.Fatal(err)
	}
	refund := testkit.NewLedger("orders_refund", events.LocalMutation, testkit.AnyObject)
	send := testkit.NewLedger("email_send", events.RemoteMutation, testkit.AnyObject)
	d, err := driver.New(driver.Config{Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "side-effects"), Shadow: cand, Tools: []driver.Tool{refund, send}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.Create(t.Context(), "shadowed", "script", nil)
	if err != nil {
		t.Fatal(err)
	}
	agent := testkit.NewScript(
		testkit.Call("orders_refund", `{"amount":400}`),
		testkit.Call("orders_refund", `{"amount":9000}`),
		testkit.Call("orders_refund", `{"amount":700}`),
		testkit.Call("email_send", `{}`),
	)
	if err := d.Drive(t.Context(), r, agent); err != nil {
		t.Fatal(err)
	}
	return log, r, refund
}

// TestShadow_RecordedAndNeverEnforced: the candidate's answers are on every
// step; the enforcing policy's are what happened.
func TestShadow_RecordedAndNeverEnforced(t *testing.T) {
	_, r, refund := shadowed(t)
	v := r.View()
	if v.Run.Status != projector.Waiting || v.PendingApproval().Kind != string(events.RemoteMutation) {
		t.Fatalf("run %s, want waiting on the side-effect policy's remote_mutation approval", v.Run.Status)
	}
	if refund.Count() != 3 {
		t.Errorf("refunds ran %d times, want all 3: the candidate's deny and approval are not enforced", refund.Count())
	}
	want := []events.Outcome{"allow", "deny", "require_approval", "allow"}
	for i, w := range want {
		s := v.Step(i + 1)
		if s.Policy == nil || s.Policy.Shadow == nil || s.Policy.Shadow.Outcome != w || !strings.HasPrefix(s.Policy.Shadow.PolicyID, "rules sha256:") {
			t.Errorf("step %d: shadow %+v, want %s from the candidate", i+1, s.Policy.Shadow, w)
		}
	}
	if k := v.Step(3).Policy.Shadow.ApprovalKind; k != "manager" {
		t.Errorf("step 3 shadow approval kind %q, want manager", k)
	}
}

func TestShadow_ReportsWhereTheCandidateDiffers(t *testing.T) {
	log, r, _ := shadowed(t)
	check := func(name string, sum shadow.Summary, got []string) {
		t.Helper()
		want := []string{"2 orders_refund narrows allow→deny", "3 orders_refund narrows allow→require_approval", "4 email_send widens require_approval→allow"}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Errorf("%s findings\n got %q\nwant %q", name, got, want)
		}
		if sum != (shadow.Summary{Evaluations: 4, Shadowed: 4, Same: 1, Widens: 1, Narrows: 2}) {
			t.Errorf("%s summary %+v", name, sum)
		}
	}
	var got []string
	collect := func(f shadow.Finding) error {
		got = append(got, strings.Join([]string{itoa(f.Step), f.Tool, f.Change, string(f.Recorded) + "→" + string(f.Shadow)}, " "))
		return nil
	}
	sum, err := shadow.Runs(t.Context(), log, []string{r.ID()}, collect)
	if err != nil {
		t.Fatal(err)
	}
	check("Runs", sum, got)
	got = nil
	sum, err = shadow.Since(t.Context(), log, time.Now().Add(-time.Hour), collect)
	if err != nil {
		t.Fatal(err)
	}
	check("Since", sum, got)
	got = nil
	sum, err = shadow.Since(t.Context(), log, time.Now().Add(time.Hour), collect)
	if err != nil || len(got) != 0 || sum.Evaluations != 0 {
		t.Errorf("since an hour ahead: %v %v %+v, want nothing", err, got, sum)
	}
}

func TestCompare(t *testing.T) {
	approval := &events.ApprovalRequest{Kind: "manager"}
	tests := []struct {
		rec, sh events.Outcome
		kind    string
		a       *events.ApprovalRequest
		want    string
	}{
		{"allow", "allow", "", nil, ""},
		{"deny", "allow", "", nil, shadow.Widens},
		{"abort", "deny", "", nil, shadow.Widens},
		{"allow", "error", "", nil, shadow.Narrows},
		{"require_approval", "require_approval", "manager", approval, ""},
		{"require_approval", "require_approval", "other", approval, shadow.Changed},
		{"abort", "error", "", nil, shadow.Changed},
	}
	for _, tt := range tests {
		b := events.PolicyBody{Outcome: tt.rec, Approval: tt.a, Shadow: &events.ShadowBody{Outcome: tt.sh, ApprovalKind: tt.kind}}
		if got := shadow.Compare(b); got != tt.want {
			t.Errorf("%s vs %s (%s): %q, want %q", tt.rec, tt.sh, tt.kind, got, tt.want)
		}
	}
	if shadow.Compare(events.PolicyBody{Outcome: "allow"}) != "" {
		t.Error("no shadow answer compared as a difference")
	}
}

func itoa(n int) string { return string(rune('0' + n)) }
