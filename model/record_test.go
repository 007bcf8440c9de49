package model_test

import (
	"bytes"
	"flag"
	"reflect"
	"slices"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/arbiter-run/arbiter/testkit"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// recordedRun drives a run with a text aside, two sibling calls (one
// refused by its schema), a third call and a final answer, in w's format.
func recordedRun(t *testing.T, w wire, replies ...testkit.ModelReply) *harness {
	t.Helper()
	if replies == nil {
		replies = []testkit.ModelReply{
			reply(w.tools("Two reads first.", call{"call_1", "read_file", `{"path":"notes.txt"}`}, call{"call_2", "read_file", `{"path":7}`})),
			reply(w.tools("", call{"call_3", "read_file", `{"path":"todo.txt"}`})),
			reply(w.text("Both files say ok.")),
		}
	}
	h := newHarness(t, w, nil, replies...)
	v := h.run("rec", "Read notes.txt and todo.txt.")
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	return h
}

// TestAgent_GoldenRequests: the bytes each provider is sent for a
// recorded run (system prompt, input, tools, every call and its result),
// so a change to rendering is a visible diff. Refresh with -update.
func TestAgent_GoldenRequests(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := recordedRun(t, w)
		var out bytes.Buffer
		for i, r := range h.srv.Requests() {
			out.WriteString("POST " + r.Path + "\n")
			out.Write(r.Body)
			out.WriteString("\n")
			if i == 0 && r.Header.Get("X-Stainless-Retry-Count") != "0" {
				t.Errorf("retry count header %q, want 0", r.Header.Get("X-Stainless-Retry-Count"))
			}
		}
		testkit.Golden(t, "requests_"+w.provider+".golden", out.String(), *update)
	})
}

// TestAgent_RecordedRepliesReproduceTheRun: the replies a run recorded,
// served again, make a second run with the same decisions, the same
// requests byte for byte and the same totals.
func TestAgent_RecordedRepliesReproduceTheRun(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		first := recordedRun(t, w)
		replies, err := testkit.RecordedReplies(first.records("rec"))
		if err != nil {
			t.Fatal(err)
		}
		second := recordedRun(t, w, replies...)
		a, b := first.srv.Requests(), second.srv.Requests()
		if len(a) != len(b) {
			t.Fatalf("%d requests, then %d", len(a), len(b))
		}
		for i := range a {
			if !bytes.Equal(a[i].Body, b[i].Body) {
				t.Errorf("request %d differs:\n%s\n%s", i, a[i].Body, b[i].Body)
			}
		}
		va, vb := first.view("rec"), second.view("rec")
		for n := 1; n <= va.Steps.Len(); n++ {
			if x, y := va.Step(n).Decision, vb.Step(n).Decision; !reflect.DeepEqual(x, y) {
				t.Errorf("step %d: %+v, then %+v", n, x, y)
			}
		}
		if va.Model.Used != vb.Model.Used || va.Run.Result != vb.Run.Result {
			t.Errorf("totals %+v result %q, then %+v %q", va.Model.Used, va.Run.Result, vb.Model.Used, vb.Run.Result)
		}
	})
}

// TestAgent_TotalsFromTheEventsAlone: summing the recorded bodies gives
// the totals the fold keeps, and replay re-checks every evaluation of a
// model run as the same.
func TestAgent_TotalsFromTheEventsAlone(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := recordedRun(t, w)
		recs := h.records("rec")
		var sum events.ModelUsage
		for _, r := range bodiesOf[events.ModelReplyBody](t, recs, events.ModelReplied) {
			sum = sum.Add(r.Usage)
		}
		for _, f := range bodiesOf[events.ModelFailBody](t, recs, events.ModelFailed) {
			sum = sum.Add(f.Charge)
		}
		evs := make([]events.Event, len(recs))
		for i, r := range recs {
			evs[i] = r.Event
		}
		v, err := projector.Fold(evs...)
		if err != nil {
			t.Fatal(err)
		}
		if want := (events.ModelUsage{Calls: 3, InputTokens: 300, OutputTokens: 60}); sum != want || v.Model.Charged() != want {
			t.Errorf("summed %+v, folded %+v, want %+v", sum, v.Model.Charged(), want)
		}
		sumr, err := replay.Audit(t.Context(), h.log, policy.WithID(policy.DefaultSideEffects(), "side-effects default"), replay.Selection{}, replay.Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !sumr.Clean() || sumr.Evaluations != 2 || sumr.Same != 2 || sumr.Tampered != 0 {
			t.Errorf("replay summary %+v, want the 2 evaluations (the schema refused the third call) the same", sumr)
		}
		if !slices.Contains(kindsOf(recs), events.ModelReplied) {
			t.Errorf("no reply recorded")
		}
	})
}
