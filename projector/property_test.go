package projector_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"pgregory.net/rapid"
)

// The generator draws from small sets so that repeats (loop detection) and
// identical fingerprints happen often. The arguments hold what JSON encoders
// like to rewrite: HTML characters, U+2028, an exactly written number.
var (
	genTools    = []string{"read", "write", "exec"}
	genArgs     = []string{`{}`, `{"path":"a.txt"}`, `{"q":"a<b && c>d"}`, `{"n":1.50}`, "{\"s\":\"line\u2028sep\"}"}
	genContents = []string{"ok", "", "same", "<html>&amp;</html>", "naïve ☃"}
	genEnds     = []events.Kind{events.RunFinished, events.RunFailed, events.RunCancelled}
)

// drawHistory draws a valid history of one run: a run.created, then steps,
// each decided and then carried along one of the paths a driver takes, and
// possibly an end. Seq, Prev, ids and times are set as [history] sets them.
func drawHistory(t *rapid.T) []events.Event {
	h := started(t, "prop")
	steps := rapid.IntRange(0, 6).Draw(t, "steps")
	for n := 1; n <= steps; n++ {
		if rapid.IntRange(0, 9).Draw(t, "tools changed") == 0 {
			h.add(events.RunTools, events.RunToolsBody{Tools: []events.ToolSpec{
				{Name: rapid.SampledFrom(genTools).Draw(t, "new tool"), Schema: json.RawMessage(`{"type":"object"}`), SideEffect: events.ReadOnly},
			}})
		}
		drawDecision(t, h, n)
		switch open := drawStep(t, h, n); open {
		case stepDone:
			continue
		case stepWaiting:
			drawEndWhileWaiting(t, h, n)
			return h.evs
		case stepEnded:
			return h.evs
		}
	}
	if rapid.Bool().Draw(t, "ends") {
		k := rapid.SampledFrom(genEnds).Draw(t, "end")
		h.add(k, events.EndBody{Reason: events.ReasonCompleted, Detail: "detail", Result: rapid.SampledFrom(genContents).Draw(t, "result")})
	}
	return h.evs
}

func drawDecision(t *rapid.T, h *history, n int) {
	if n > 1 && rapid.IntRange(0, 3).Draw(t, "same decision again") == 0 {
		// The agent asks for the same call again (loop detection).
		v := h.fold()
		d := v.Step(n - 1).Decision
		d.Step, d.CallID = n, fmt.Sprintf("call-%d", n)
		h.add(events.StepDecided, d)
		return
	}
	tool := rapid.SampledFrom(genTools).Draw(t, "tool")
	if rapid.IntRange(0, 9).Draw(t, "binary args") == 0 {
		h.add(events.StepDecided, events.StepDecidedBody{Step: n, Tool: tool, ArgsBytes: []byte{0xff, byte(n), '{'}})
		return
	}
	h.decide(n, tool, rapid.SampledFrom(genArgs).Draw(t, "args"))
}

type stepEnd int

const (
	stepDone    stepEnd = iota // observed: the next step may be decided
	stepWaiting                // waiting on an approval
	stepEnded                  // the run ended
)

func drawStep(t *rapid.T, h *history, n int) stepEnd {
	switch rapid.SampledFrom([]string{"invalid", "allow", "deny", "abort", "approval", "interrupted"}).Draw(t, "path") {
	case "invalid":
		h.observe(n, rapid.SampledFrom([]events.ObservationKind{events.ObsInvalidArguments, events.ObsUnknownTool, events.ObsInvalidDecision}).Draw(t, "invalid"), "bad arguments")
	case "allow":
		allow(h, n, "")
		drawObservation(t, h, n)
	case "deny":
		h.policy(n, events.Deny, rapid.SampledFrom(genContents).Draw(t, "deny reason"))
	case "abort":
		h.policy(n, events.Abort, "too dangerous")
		return stepEnded
	case "approval":
		return drawApproval(t, h, n, fmt.Sprintf("ap%d", n), events.OriginPolicy)
	case "interrupted":
		allow(h, n, "")
		switch rapid.SampledFrom([]string{events.ResolvedDone, events.ResolvedNotDone, events.ResolvedRerun}).Draw(t, "resolution") {
		case events.ResolvedDone:
			o := events.ObservedBody{Step: n, Kind: events.ObsResult, Content: rapid.SampledFrom(genContents).Draw(t, "reconciled")}
			h.add(events.StepInterrupted, events.InterruptedBody{Step: n, Resolution: events.ResolvedDone, Observation: &o})
		case events.ResolvedNotDone:
			h.add(events.StepInterrupted, events.InterruptedBody{Step: n, Resolution: events.ResolvedNotDone})
			return drawApproval(t, h, n, fmt.Sprintf("rec%d", n), events.OriginRecovery)
		case events.ResolvedRerun:
			h.add(events.StepInterrupted, events.InterruptedBody{Step: n, Resolution: events.ResolvedRerun})
			drawObservation(t, h, n)
		}
	}
	return stepDone
}

func allow(h *history, n int, consumes string) {
	h.add(events.StepPolicy, events.PolicyBody{
		Step: n, Outcome: events.Allow, PolicyID: "p1", Args: json.RawMessage(`{"path":"a.txt","q":"<&>"}`),
		ToolHash: "h-write", Consumes: consumes, Resume: consumes != "",
	})
}

func drawObservation(t *rapid.T, h *history, n int) {
	kind := rapid.SampledFrom([]events.ObservationKind{events.ObsResult, events.ObsResult, events.ObsToolError, events.ObsTimeout}).Draw(t, "observed")
	h.observe(n, kind, rapid.SampledFrom(genContents).Draw(t, "content"))
}

// drawApproval asks for approval id on step n and draws what the operator
// and the runtime do about it.
func drawApproval(t *rapid.T, h *history, n int, id, origin string) stepEnd {
	req := approvalRequest(id, "remote_write")
	if origin == events.OriginRecovery {
		req.Kind = "interrupted_side_effect"
	}
	if rapid.Bool().Draw(t, "expires") {
		at := base.Add(24 * time.Hour)
		req.ExpiresAt = &at
	}
	h.add(events.ApprovalRequested, events.PolicyBody{
		Step: n, Outcome: events.RequireApproval, PolicyID: "p1", Args: json.RawMessage(`{"path":"a.txt"}`),
		Approval: req, Origin: origin,
	})
	if rapid.IntRange(0, 4).Draw(t, "refused decision") == 0 {
		h.add(events.ApprovalRefused, events.RefusedBody{Approval: id, Intake: uint64(len(h.evs) + 1), Reason: "no such approval"})
	}
	switch rapid.SampledFrom([]string{"grant", "refused then grant", "deny", "expire", "wait", "supersede"}).Draw(t, "operator") {
	case "grant":
		h.grant(id)
	case "refused then grant":
		g := h.grant(id)
		h.add(events.ApprovalRefused, events.RefusedBody{Approval: id, Event: g.ID, Reason: "bad signature"})
		h.grant(id)
	case "deny":
		h.decideApproval(events.ApprovalDenied, id)
		h.add(events.RunCancelled, events.EndBody{Reason: events.ReasonApprovalDenied})
		return stepEnded
	case "expire":
		h.add(events.ApprovalExpired, events.ExpiredBody{Approval: id})
		return stepEnded
	case "wait":
		return stepWaiting
	case "supersede":
		// Evaluated again without the grant (a changed policy, say): the
		// approval can never be used after that.
		h.policy(n, events.Deny, "no longer allowed")
		return stepDone
	}
	allow(h, n, id)
	drawObservation(t, h, n)
	return stepDone
}

// drawEndWhileWaiting may cancel a waiting run (nothing folds after it).
func drawEndWhileWaiting(t *rapid.T, h *history, n int) {
	if !rapid.Bool().Draw(t, "cancel while waiting") {
		return
	}
	h.add(events.RunCancelled, events.EndBody{Reason: events.ReasonCancelled})
}

func foldAll(t rapid.TB, evs []events.Event) projector.View {
	t.Helper()
	v, err := projector.Fold(evs...)
	if err != nil {
		t.Fatalf("fold of a generated history: %v", err)
	}
	return v
}

// TestFold_PrefixThenRestEqualsAll holds Apply's determinism contract: the
// view of any prefix, carried on with the rest of the events, is the view of
// them all.
func TestFold_PrefixThenRestEqualsAll(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := drawHistory(t)
		want := foldAll(t, evs)
		if want.Run.Events != uint64(len(evs)) {
			t.Fatalf("folded %d events, want %d", want.Run.Events, len(evs))
		}
		for k := 0; k <= len(evs); k++ {
			v, err := projector.Fold(evs[:k]...)
			if err != nil {
				t.Fatalf("fold of the first %d events: %v", k, err)
			}
			for _, e := range evs[k:] {
				if err := v.Apply(e); err != nil {
					t.Fatalf("split at %d: apply event %d (%s): %v", k, e.Seq, e.Kind, err)
				}
			}
			if d := diff(v, want); d != "" {
				t.Fatalf("split at %d: prefix then rest differs from all: %s", k, d)
			}
		}
	})
}

// TestView_CloneEqualsOriginal: the clone of every view a history passes
// through is DeepEqual to it, and carried on with the rest of the events it
// is the view of them all (a worker folds on from a snapshot's copy).
func TestView_CloneEqualsOriginal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := drawHistory(t)
		want := foldAll(t, evs)
		for k := 0; k <= len(evs); k++ {
			v := foldAll(t, evs[:k])
			c := v.Clone()
			if d := diff(c, v); d != "" {
				t.Fatalf("clone of the view after %d events differs: %s", k, d)
			}
			for _, e := range evs[k:] {
				if err := c.Apply(e); err != nil {
					t.Fatalf("split at %d: apply event %d (%s) to a clone: %v", k, e.Seq, e.Kind, err)
				}
			}
			if d := diff(c, want); d != "" {
				t.Fatalf("split at %d: clone then rest differs from all: %s", k, d)
			}
		}
	})
}

// TestFold_PrefixCloneIsUntouched: folding the rest into a clone of a prefix
// view leaves the prefix view as it was.
func TestFold_PrefixCloneIsUntouched(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := drawHistory(t)
		k := rapid.IntRange(1, len(evs)).Draw(t, "split")
		v := foldAll(t, evs[:k])
		c := v.Clone()
		for _, e := range evs[k:] {
			if err := c.Apply(e); err != nil {
				t.Fatalf("apply event %d (%s) to a clone: %v", e.Seq, e.Kind, err)
			}
		}
		if d := diff(v, foldAll(t, evs[:k])); d != "" {
			t.Fatalf("folding into the clone changed the original: %s", d)
		}
	})
}

// TestFold_StepsCopyIsUntouched: Steps is a value. A plain copy of a view
// (no Clone) holds steps that folding the rest into the copy cannot change,
// although the fold changes the copy's last step in place.
func TestFold_StepsCopyIsUntouched(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := drawHistory(t)
		k := rapid.IntRange(1, len(evs)).Draw(t, "split")
		v := foldAll(t, evs[:k])
		c := v
		for _, e := range evs[k:] {
			if err := c.Apply(e); err != nil {
				t.Fatalf("apply event %d (%s) to a copy: %v", e.Seq, e.Kind, err)
			}
		}
		want := foldAll(t, evs[:k]).Steps.Slice()
		if d := firstDiff("view.Steps", reflect.ValueOf(v.Steps.Slice()), reflect.ValueOf(want)); d != "" {
			t.Fatalf("folding into a copy changed the original's steps: %s", d)
		}
	})
}

// TestFold_ForkIsUntouched: folding the rest of a history into a fork of a
// view (what a writer does with an event it is still appending) leaves the
// view as it was, and the fork ends as the whole history's view.
func TestFold_ForkIsUntouched(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := drawHistory(t)
		k := rapid.IntRange(1, len(evs)).Draw(t, "split")
		v := foldAll(t, evs[:k])
		f := v.Fork()
		for _, e := range evs[k:] {
			if err := f.Apply(e); err != nil {
				t.Fatalf("apply event %d (%s) to a fork: %v", e.Seq, e.Kind, err)
			}
		}
		if d := diff(v, foldAll(t, evs[:k])); d != "" {
			t.Fatalf("folding into the fork changed the original: %s", d)
		}
		if d := diff(f, foldAll(t, evs)); d != "" {
			t.Fatalf("fork then rest differs from all: %s", d)
		}
	})
}

// TestFold_Deterministic: the same events give the same view, whether they
// are the events a writer built or the ones a reader decodes from the
// stored bytes.
func TestFold_Deterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := drawHistory(t)
		a, b := foldAll(t, evs), foldAll(t, evs)
		if d := diff(b, a); d != "" {
			t.Fatalf("two folds of the same events differ: %s", d)
		}
		stored := make([]events.Event, len(evs))
		for i, e := range evs {
			data, err := e.Encode()
			if err != nil {
				t.Fatalf("encode event %d: %v", e.Seq, err)
			}
			if stored[i], err = events.Decode(data); err != nil {
				t.Fatalf("decode event %d: %v", e.Seq, err)
			}
		}
		if d := diff(foldAll(t, stored), a); d != "" {
			t.Fatalf("fold of the stored events differs from the fold of the written ones: %s", d)
		}
	})
}

// badEvents are ways to build, after a valid prefix, an event that must not
// fold whatever the prefix holds.
var badEvents = []string{
	"seq behind", "seq ahead", "other run", "policy for a missing step", "observation for a missing step",
	"decided out of order", "consumes a missing approval", "expires a missing approval",
	"interrupted missing step", "unknown kind", "malformed body",
}

func drawBadEvent(t *rapid.T, h *history, v projector.View) events.Event {
	missing := v.Steps.Len() + rapid.IntRange(1, 3).Draw(t, "missing step")
	if rapid.Bool().Draw(t, "step zero or below") {
		missing = -rapid.IntRange(0, 2).Draw(t, "step at or below zero")
	}
	switch rapid.SampledFrom(badEvents).Draw(t, "bad") {
	case "seq behind":
		e := h.next(events.StepObserved, events.ObservedBody{Step: v.Steps.Len(), Kind: events.ObsResult})
		e.Seq = uint64(rapid.IntRange(0, int(v.Run.Events)).Draw(t, "seq"))
		return e
	case "seq ahead":
		e := h.next(events.StepDecided, events.StepDecidedBody{Step: v.Steps.Len() + 1, Tool: "read"})
		e.Seq += uint64(rapid.IntRange(1, 5).Draw(t, "ahead"))
		return e
	case "other run":
		e := h.next(events.StepDecided, events.StepDecidedBody{Step: v.Steps.Len() + 1, Tool: "read"})
		e.Run = "other"
		return e
	case "policy for a missing step":
		return h.next(events.StepPolicy, events.PolicyBody{Step: missing, Outcome: events.Allow})
	case "observation for a missing step":
		return h.next(events.StepObserved, events.ObservedBody{Step: missing, Kind: events.ObsResult})
	case "decided out of order":
		n := v.Steps.Len() + 2 + rapid.IntRange(0, 2).Draw(t, "skip")
		if v.Steps.Len() > 0 && rapid.Bool().Draw(t, "behind") {
			n = rapid.IntRange(0, v.Steps.Len()).Draw(t, "decided")
		}
		return h.next(events.StepDecided, events.StepDecidedBody{Step: n, Tool: "read"})
	case "consumes a missing approval":
		return h.next(events.StepPolicy, events.PolicyBody{Step: v.Steps.Len(), Outcome: events.Allow, Consumes: "missing"})
	case "expires a missing approval":
		return h.next(events.ApprovalExpired, events.ExpiredBody{Approval: "missing"})
	case "interrupted missing step":
		return h.next(events.StepInterrupted, events.InterruptedBody{Step: missing, Resolution: events.ResolvedRerun})
	case "unknown kind":
		e := h.next(events.StepObserved, events.ObservedBody{Step: v.Steps.Len()})
		e.Kind = events.Kind(rapid.SampledFrom([]string{"", "step.exploded", "run.created.again"}).Draw(t, "kind"))
		return e
	default: // malformed body
		// Bodies no kind's body type decodes (an unknown field or a null
		// would decode, to a zero body that may well fold).
		e := h.next(events.StepObserved, events.ObservedBody{})
		e.Kind = rapid.SampledFrom(events.Kinds).Draw(t, "malformed kind")
		e.Body = json.RawMessage(rapid.SampledFrom([]string{`[]`, `"x"`, `7`, `{`, `{"step":1,`}).Draw(t, "body"))
		return e
	}
}

// TestFold_ErrorLeavesViewUnchanged holds the other half of Apply's
// contract: an event that does not fold is an ErrFold and changes nothing.
func TestFold_ErrorLeavesViewUnchanged(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := drawHistory(t)
		k := rapid.IntRange(1, len(evs)).Draw(t, "prefix")
		v := foldAll(t, evs[:k])
		h := &history{t: t, run: "prop", evs: evs[:k:k]}
		bad := drawBadEvent(t, h, v)
		err := v.Apply(bad)
		if !errors.Is(err, projector.ErrFold) {
			t.Fatalf("apply %s seq %d run %q body %s: got %v, want ErrFold", bad.Kind, bad.Seq, bad.Run, bad.Body, err)
		}
		if d := diff(v, foldAll(t, evs[:k])); d != "" {
			t.Fatalf("refused %s event changed the view: %s", bad.Kind, d)
		}
		// The view still takes the rest of the history.
		for _, e := range evs[k:] {
			if err := v.Apply(e); err != nil {
				t.Fatalf("apply event %d (%s) after a refused event: %v", e.Seq, e.Kind, err)
			}
		}
		if d := diff(v, foldAll(t, evs)); d != "" {
			t.Fatalf("view after a refused event then the rest differs from all: %s", d)
		}
	})
}

// diff returns "" when got and want are reflect.DeepEqual, or else the path
// to their first difference with both values: %+v of a view prints pointers,
// which hides what differs.
func diff(got, want projector.View) string {
	if reflect.DeepEqual(got, want) {
		return ""
	}
	// Steps keep their blocks in unexported fields: compare what they hold.
	if d := firstDiff("view.Steps", reflect.ValueOf(got.Steps.Slice()), reflect.ValueOf(want.Steps.Slice())); d != "" {
		return d
	}
	got.Steps, want.Steps = projector.Steps{}, projector.Steps{}
	if d := firstDiff("view", reflect.ValueOf(got), reflect.ValueOf(want)); d != "" {
		return d
	}
	return "views differ only in how their steps are stored"
}

func firstDiff(path string, a, b reflect.Value) string {
	if a.IsValid() != b.IsValid() {
		return fmt.Sprintf("%s: got valid %v, want valid %v", path, a.IsValid(), b.IsValid())
	}
	if !a.IsValid() {
		return ""
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() != b.IsNil() {
			return fmt.Sprintf("%s: got nil %v, want nil %v", path, a.IsNil(), b.IsNil())
		}
		if a.IsNil() {
			return ""
		}
		return firstDiff(path, a.Elem(), b.Elem())
	case reflect.Struct:
		if a.Type() == reflect.TypeFor[time.Time]() {
			if !reflect.DeepEqual(a.Interface(), b.Interface()) {
				return fmt.Sprintf("%s: got %v, want %v", path, a.Interface(), b.Interface())
			}
			return ""
		}
		for i := range a.NumField() {
			if d := firstDiff(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice:
		if a.IsNil() != b.IsNil() {
			return fmt.Sprintf("%s: got nil %v (len %d), want nil %v (len %d)", path, a.IsNil(), a.Len(), b.IsNil(), b.Len())
		}
		if a.Type().Elem().Kind() == reflect.Uint8 {
			if string(a.Bytes()) != string(b.Bytes()) {
				return fmt.Sprintf("%s: got %q, want %q", path, a.Bytes(), b.Bytes())
			}
			return ""
		}
		if a.Len() != b.Len() {
			return fmt.Sprintf("%s: got len %d, want len %d", path, a.Len(), b.Len())
		}
		for i := range a.Len() {
			if d := firstDiff(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i)); d != "" {
				return d
			}
		}
		return ""
	default:
		if !reflect.DeepEqual(a.Interface(), b.Interface()) {
			return fmt.Sprintf("%s: got %#v, want %#v", path, a.Interface(), b.Interface())
		}
		return ""
	}
}

// TestView_JSONRoundTripIsExact: a view survives being stored as JSON (a
// worker's snapshot) unchanged, at every point of a run.
func TestView_JSONRoundTripIsExact(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		evs := drawHistory(t)
		for k := 0; k <= len(evs); k++ {
			v := foldAll(t, evs[:k])
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(v); err != nil {
				t.Fatalf("encode the view after %d events: %v", k, err)
			}
			b := buf.Bytes()
			var back projector.View
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("unmarshal the view after %d events: %v", k, err)
			}
			if d := diff(back, v); d != "" {
				t.Fatalf("view after %d events changed through JSON: %s", k, d)
			}
		}
	})
}
