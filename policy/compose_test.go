package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// fixed answers the same whatever it is asked, and counts its calls.
type fixed struct {
	d     policy.Ruling
	err   error
	calls *int
}

func (f fixed) Evaluate(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
	*f.calls++
	return f.d, f.err
}

func member(id string, o events.Outcome, calls *int) policy.IdentifiedPolicy {
	d := policy.Ruling{Outcome: o, Reason: id + " says " + string(o)}
	if o == events.RequireApproval {
		d, _ = policy.NeedApproval(id, id+" says ask", nil, nil)
	}
	return policy.WithID(fixed{d: d, calls: calls}, id)
}

func composeReq() (policy.Request, projector.View) {
	return policy.Request{Run: "r", Step: 1, Tool: events.ToolSpec{Name: "t", SideEffect: events.ReadOnly}, Args: json.RawMessage(`{}`)}, projector.View{}
}

// TestCompose_DenyWinsWhateverTheOrderAndAllAreAsked.
func TestCompose_DenyWinsWhateverTheOrderAndAllAreAsked(t *testing.T) {
	outcomes := []events.Outcome{events.Allow, events.RequireApproval, events.Deny}
	perms := [][]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	for _, perm := range perms {
		var calls int
		var ms []policy.Policy
		for _, i := range perm {
			ms = append(ms, member(string(outcomes[i]), outcomes[i], &calls))
		}
		c, err := policy.Compose(ms...)
		if err != nil {
			t.Fatal(err)
		}
		req, v := composeReq()
		d, err := c.Evaluate(context.Background(), req, v)
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome != events.Deny || d.Reason != "deny: deny says deny" {
			t.Errorf("order %v: got %s %q, want deny from the deny member", perm, d.Outcome, d.Reason)
		}
		if calls != 3 {
			t.Errorf("order %v: %d members asked, want all 3", perm, calls)
		}
		if len(d.Parts) != 3 {
			t.Fatalf("order %v: parts %+v, want one per member", perm, d.Parts)
		}
		for i, p := range d.Parts {
			if o := outcomes[perm[i]]; p.ID != string(o) || p.Outcome != o || p.Reason != string(o)+" says "+string(o) && o != events.RequireApproval {
				t.Errorf("order %v: part %d = %+v, want member %s's id, outcome and reason", perm, i, p, o)
			}
		}
	}
}

func TestCompose_Strength(t *testing.T) {
	tests := []struct {
		in   []events.Outcome
		want events.Outcome
	}{
		{[]events.Outcome{events.Allow, events.Allow}, events.Allow},
		{[]events.Outcome{events.Allow, events.RequireApproval}, events.RequireApproval},
		{[]events.Outcome{events.Deny, events.Abort}, events.Abort},
		{[]events.Outcome{events.Abort, events.Deny}, events.Abort},
	}
	for _, tt := range tests {
		var calls int
		var ms []policy.Policy
		for i, o := range tt.in {
			ms = append(ms, member(string(o)+string(rune('a'+i)), o, &calls))
		}
		c, _ := policy.Compose(ms...)
		req, v := composeReq()
		d, err := c.Evaluate(context.Background(), req, v)
		if err != nil || d.Outcome != tt.want {
			t.Errorf("%v: got %s (%v), want %s", tt.in, d.Outcome, err, tt.want)
		}
		if tt.want == events.RequireApproval && (d.Approval == nil || d.Approval.Kind != "require_approvalb") {
			t.Errorf("%v: approval %+v, want the asking member's", tt.in, d.Approval)
		}
	}
}

// TestCompose_IDDerivedFromMembers: any change of a member's id, or of the
// order, changes the composed id.
func TestCompose_IDDerivedFromMembers(t *testing.T) {
	var n int
	id := func(ids ...string) string {
		var ms []policy.Policy
		for _, s := range ids {
			ms = append(ms, member(s, events.Allow, &n))
		}
		c, err := policy.Compose(ms...)
		if err != nil {
			t.Fatal(err)
		}
		return c.PolicyID()
	}
	base := id("a", "b")
	if base != id("a", "b") {
		t.Error("the same members gave two ids")
	}
	for _, other := range [][]string{{"b", "a"}, {"a", "c"}, {"a"}, {"a", "b", "c"}, {"a,", "b"}, {"ab"}} {
		if id(other...) == base {
			t.Errorf("members %v have the id of [a b]", other)
		}
	}
	if err := policy.ValidateID(base); err != nil {
		t.Errorf("composed id: %v", err)
	}
}

func TestCompose_MemberWithoutIDRefused(t *testing.T) {
	var n int
	_, err := policy.Compose(member("a", events.Allow, &n), policy.DefaultSideEffects())
	if !errors.Is(err, policy.ErrBadID) {
		t.Errorf("Compose with an unnamed member = %v, want ErrBadID", err)
	}
	if _, err := policy.Compose(); !errors.Is(err, policy.ErrBadID) {
		t.Errorf("Compose() = %v, want ErrBadID", err)
	}
}

// TestCompose_MemberErrorFailsClosed: an error or an outcome outside the
// four from any member is the composed policy's error.
func TestCompose_MemberErrorFailsClosed(t *testing.T) {
	var n int
	boom := errors.New("boom")
	bad := policy.WithID(fixed{err: boom, calls: &n}, "bad")
	odd := policy.WithID(fixed{d: policy.Ruling{Outcome: "maybe"}, calls: &n}, "odd")
	for _, m := range []policy.Policy{bad, odd} {
		c, _ := policy.Compose(member("ok", events.Allow, &n), m)
		req, v := composeReq()
		if _, err := c.Evaluate(context.Background(), req, v); err == nil {
			t.Errorf("member %s: no error, want one", policy.ID(m))
		}
	}
	c, _ := policy.Compose(bad)
	req, v := composeReq()
	if _, err := c.Evaluate(context.Background(), req, v); !errors.Is(err, boom) {
		t.Errorf("error %v, want it to wrap the member's", err)
	}
}

// hider is a member that hides one tool.
type hider struct {
	fixed
	hide string
}

func (h hider) Visible(t events.ToolSpec, _ projector.View) bool { return t.Name != h.hide }

func TestCompose_VisibleOnlyWhenEveryMemberShows(t *testing.T) {
	var n int
	c, err := policy.Compose(member("a", events.Allow, &n), policy.WithID(hider{fixed: fixed{calls: &n}, hide: "x"}, "h"))
	if err != nil {
		t.Fatal(err)
	}
	// WithID hides the member's Visible: wrap a Discoverer that names itself.
	if policy.Visible(c, events.ToolSpec{Name: "x"}, projector.View{}) != true {
		t.Error("a member wrapped by WithID lost its Visible, want it shown (WithID keeps only Evaluate)")
	}
	named := namedHider{hider{fixed: fixed{calls: &n}, hide: "x"}}
	c, _ = policy.Compose(member("a", events.Allow, &n), named)
	if policy.Visible(c, events.ToolSpec{Name: "x"}, projector.View{}) || !policy.Visible(c, events.ToolSpec{Name: "y"}, projector.View{}) {
		t.Error("composed visibility: want x hidden by the member, y shown")
	}
	if !policy.Visible(policy.DefaultSideEffects(), events.ToolSpec{Name: "x"}, projector.View{}) {
		t.Error("a policy that is no Discoverer hides a tool")
	}
}

type namedHider struct{ hider }

func (namedHider) PolicyID() string { return "named hider" }

// quiet is a Discoverer that says it hides nothing.
type quiet struct{ namedHider }

func (quiet) Discovers() bool { return false }

func TestDiscovers(t *testing.T) {
	var n int
	h := namedHider{hider{fixed: fixed{calls: &n}, hide: "x"}}
	q := quiet{h}
	if policy.Discovers(policy.DefaultSideEffects()) || !policy.Discovers(h) || policy.Discovers(q) {
		t.Error("Discovers: want false for a policy that is no Discoverer or says so, true for a Discoverer")
	}
	c1, _ := policy.Compose(member("a", events.Allow, &n), q)
	c2, _ := policy.Compose(member("a", events.Allow, &n), q, h)
	if policy.Discovers(c1) || !policy.Discovers(c2) {
		t.Error("Composed.Discovers: want true only when a member discovers")
	}
}

// writer writes through the request and view it is handed.
type writer struct{}

func (writer) Evaluate(_ context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	if len(req.Args) > 0 {
		req.Args[0] = 'X'
	}
	if len(v.Run.Tools) > 0 {
		v.Run.Tools[0].Name = "changed"
	}
	return policy.Ruling{Outcome: events.Allow, Reason: "wrote"}, nil
}

// reader records what it was handed.
type reader struct{ args, tool *string }

func (r reader) Evaluate(_ context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	*r.args, *r.tool = string(req.Args), v.Run.Tools[0].Name
	return policy.Ruling{Outcome: events.Allow, Reason: "read"}, nil
}

// TestCompose_MembersCannotChangeWhatOthersSee: a member writing through
// its request and view changes nothing a later member is handed, with the
// side-effect mapping (handed the composed policy's own copies, since it
// reads neither) before and between them.
func TestCompose_MembersCannotChangeWhatOthersSee(t *testing.T) {
	se := policy.WithID(policy.DefaultSideEffects(), "side-effects")
	var args, tool string
	c, err := policy.Compose(se, policy.WithID(writer{}, "writer"), se, policy.WithID(reader{&args, &tool}, "reader"))
	if err != nil {
		t.Fatal(err)
	}
	req, v := composeReq()
	v.Run.Tools = []events.ToolSpec{req.Tool}
	d, err := c.Evaluate(context.Background(), req, v)
	if err != nil || d.Outcome != events.Allow {
		t.Fatalf("got %s, %v; want allow", d.Outcome, err)
	}
	if args != `{}` || tool != "t" {
		t.Errorf("the last member was handed args %s and tool %q, want {} and t: an earlier member's writes reached it", args, tool)
	}
	if string(req.Args) != `{}` || v.Run.Tools[0].Name != "t" {
		t.Errorf("the caller's request or view was changed: %s %q", req.Args, v.Run.Tools[0].Name)
	}
}

// parted answers with n parts named by its call count, so that every call
// names new parts.
type parted struct {
	n     int
	calls *int
}

func (p parted) Evaluate(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
	*p.calls++
	d := policy.Ruling{Outcome: events.Allow, Reason: "parts"}
	for i := 0; i < p.n; i++ {
		d.Parts = append(d.Parts, events.PolicyPart{ID: fmt.Sprintf("c%d/p%d", *p.calls, i), Outcome: events.Allow})
	}
	return d, nil
}

// TestCompose_PartIDsPrefixedEveryCall: a member's parts are named by
// its position on every call, those it named before and new ones, past
// the number of prefixed ids kept.
func TestCompose_PartIDsPrefixedEveryCall(t *testing.T) {
	var calls int
	c, err := policy.Compose(policy.WithID(policy.DefaultSideEffects(), "se"), policy.WithID(parted{n: 300, calls: &calls}, "parted"))
	if err != nil {
		t.Fatal(err)
	}
	req, v := composeReq()
	for k := 1; k <= 6; k++ {
		d, err := c.Evaluate(context.Background(), req, v)
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Parts) != 2+300 {
			t.Fatalf("call %d: %d parts, want 302", k, len(d.Parts))
		}
		for i, p := range d.Parts[2:] {
			if want := fmt.Sprintf("2 / c%d/p%d", k, i); p.ID != want {
				t.Fatalf("call %d: part %d is %q, want %q", k, i, p.ID, want)
			}
		}
	}
}

// appender is a member that writes its parts into the composition's
// (policy.PartsAppender); its plain Evaluate is never to be called then.
type appender struct {
	parts   []string
	short   bool // hand back a ruling without the parts it was given
	plain   *int
	prefix  string
	appends *int
}

func (a *appender) PolicyID() string { return "app" }

func (a *appender) Evaluate(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
	*a.plain++
	return policy.Ruling{Outcome: events.Allow, Reason: "plain"}, nil
}

func (a *appender) AppendingParts(prefix string) policy.PartsEvaluator {
	b := *a
	b.prefix = prefix
	return &b
}

func (a *appender) EvaluateAppend(_ context.Context, _ policy.Request, _ projector.View, dst []events.PolicyPart) (policy.Ruling, error) {
	*a.appends++
	for _, id := range a.parts {
		dst = append(dst, events.PolicyPart{ID: a.prefix + id, Outcome: events.Allow})
	}
	if a.short {
		dst = dst[:0]
	}
	return policy.Ruling{Outcome: events.Deny, Reason: "appended", Parts: dst}, nil
}

// TestCompose_AppenderWritesItsPartsInPlace: a member that offers to is
// asked through its appending evaluator, with its position as the prefix,
// and its parts follow its own part in the record; one that hands back a
// ruling without the parts it was given fails the composition closed.
func TestCompose_AppenderWritesItsPartsInPlace(t *testing.T) {
	var calls, plain, appends int
	a := &appender{parts: []string{"x", "y"}, plain: &plain, appends: &appends}
	c, err := policy.Compose(member("m1", events.Allow, &calls), a)
	if err != nil {
		t.Fatal(err)
	}
	req, v := composeReq()
	for range 3 {
		d, err := c.Evaluate(context.Background(), req, v)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, p := range d.Parts {
			got = append(got, p.ID+"="+string(p.Outcome)+":"+p.Reason)
		}
		want := []string{"m1=allow:m1 says allow", "app=deny:appended", "2 / x=allow:", "2 / y=allow:"}
		if !reflect.DeepEqual(got, want) || d.Outcome != events.Deny || d.Reason != "app: appended" {
			t.Fatalf("ruling %s %q, parts %q; want deny by app, parts %q", d.Outcome, d.Reason, got, want)
		}
	}
	if plain != 0 || appends != 3 {
		t.Errorf("plain Evaluate called %d times, the appending one %d: want 0 and 3", plain, appends)
	}
	bad := &appender{parts: []string{"x"}, short: true, plain: &plain, appends: &appends}
	c, err = policy.Compose(member("m1", events.Allow, &calls), bad)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := c.Evaluate(context.Background(), req, v); err == nil {
		t.Fatalf("a member that dropped the parts it was handed: ruling %+v, want an error", d)
	}
}
