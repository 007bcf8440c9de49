package replay_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/replay"
)

func TestCheck_SamePolicyAllSame(t *testing.T) {
	lines := fixture(t, "fleet.jsonl")
	r := check(t, load(t, lines), baseline(), replay.Selection{}, replay.Options{Operators: operators(t, 1)})
	golden(t, "same.golden", r.text())
	want := len(evaluations(t, lines))
	if r.sum.Same != want || r.sum.Evaluations != want {
		t.Errorf("same %d of %d evaluations, want all %d", r.sum.Same, r.sum.Evaluations, want)
	}
	if !r.sum.Clean() {
		t.Errorf("summary not clean: %+v", r.sum)
	}
	if r.sum.GrantsValid != 2 || r.sum.Grants != 2 {
		t.Errorf("grants valid %d of %d, want 2 of 2", r.sum.GrantsValid, r.sum.Grants)
	}
	if r.sum.Events != uint64(len(lines)) {
		t.Errorf("events read: got %d, want %d", r.sum.Events, len(lines))
	}
}

func TestCheck_OneRuleChangeReportedAtExactlyItsSteps(t *testing.T) {
	tests := []struct {
		name    string
		class   events.SideEffect
		outcome events.Outcome
		golden  string
		// want says the change expected of an evaluation of the class.
		want func(evaluation) replay.Change
	}{
		{
			name: "remote mutation allowed widens", class: events.RemoteMutation, outcome: events.Allow, golden: "widen.golden",
			want: func(ev evaluation) replay.Change {
				if ev.body.Consumes != "" {
					return replay.Changed // the granted call ran before as well
				}
				return replay.Widens
			},
		},
		{
			name: "read only needing approval narrows", class: events.ReadOnly, outcome: events.RequireApproval, golden: "narrow.golden",
			want: func(evaluation) replay.Change { return replay.Narrows },
		},
		{
			name: "destructive aborting changes", class: events.Destructive, outcome: events.Abort, golden: "abort.golden",
			want: func(evaluation) replay.Change { return replay.Changed },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := fixture(t, "fleet.jsonl")
			p, opts := changed(tt.class, tt.outcome)
			r := check(t, load(t, lines), p, replay.Selection{}, opts)
			golden(t, tt.golden, r.text())
			evs := evaluations(t, lines)
			results := slices.Clone(r.results) // each run's in order; in stream order here
			slices.SortFunc(results, func(a, b replay.Result) int { return cmp.Compare(a.StreamSeq, b.StreamSeq) })
			if len(results) != len(evs) {
				t.Fatalf("results: got %d, want %d", len(r.results), len(evs))
			}
			touched := 0
			for i, ev := range evs {
				res := results[i]
				if res.StreamSeq != ev.seq {
					t.Fatalf("result %d at stream seq %d, want %d", i, res.StreamSeq, ev.seq)
				}
				wantVerdict, wantChange := replay.Same, replay.Change("")
				if ev.class == tt.class {
					wantVerdict, wantChange = replay.Different, tt.want(ev)
					touched++
				}
				if res.Verdict != wantVerdict || res.Change != wantChange {
					t.Errorf("%s step %d (%s, %s): got %s %s, want %s %s", ev.run, ev.step, ev.class, ev.kind, res.Verdict, res.Change, wantVerdict, wantChange)
				}
			}
			if touched == 0 || r.sum.Different != touched {
				t.Errorf("different: got %d, want %d (>0)", r.sum.Different, touched)
			}
			if r.sum.Clean() {
				t.Error("summary clean with differences")
			}
		})
	}
}

func TestCheck_OtherPolicyIsNotCheckable(t *testing.T) {
	lines := fixture(t, "other_policies.jsonl")
	r := check(t, load(t, lines), baseline(), replay.Selection{}, replay.Options{})
	golden(t, "other_policies.golden", r.text())
	if len(r.results) == 0 {
		t.Fatal("no results")
	}
	for _, res := range r.results {
		want := replay.OtherPolicy
		if res.Run == "echo" {
			want = replay.NoRecordedID
		}
		if res.Verdict != replay.NotCheckable || res.Cause != want || res.Replayed != nil {
			t.Errorf("%s step %d: got %s %s (replayed %v), want not_checkable %s, not replayed", res.Run, res.Step, res.Verdict, res.Cause, res.Replayed, want)
		}
	}
	if !r.sum.Clean() || r.sum.NotCheckable != len(r.results) {
		t.Errorf("summary: %+v, want clean with every evaluation not checkable", r.sum)
	}
}

func TestCheck_CheckingPolicyWithoutID(t *testing.T) {
	lines := fixture(t, "fleet.jsonl")
	log := load(t, lines)
	n := len(evaluations(t, lines))
	tests := []struct {
		name string
		opts replay.Options
		want func(replay.Summary) int
		what string
	}{
		{"no baseline: not checkable", replay.Options{}, func(s replay.Summary) int { return s.NotCheckable }, "not checkable"},
		{"baseline named: re-checked", replay.Options{Baseline: baselineID}, func(s replay.Summary) int { return s.Same }, "same"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := check(t, log, policy.DefaultSideEffects(), replay.Selection{}, tt.opts)
			if got := tt.want(r.sum); got != n {
				t.Errorf("%s: got %d, want %d", tt.what, got, n)
			}
			if tt.opts.Baseline == "" && r.results[0].Cause != replay.NoCheckingID {
				t.Errorf("cause: got %q, want %q", r.results[0].Cause, replay.NoCheckingID)
			}
		})
	}
}

func TestCheck_TamperedEventIsReported(t *testing.T) {
	orig := fixture(t, "fleet.jsonl")
	at := lineOf(t, orig, "alpha", events.StepDecided, `tool write_file"`)
	tests := []struct {
		name   string
		tamper func(lines [][]byte) ([][]byte, [][]byte) // altered lines and their originals
		golden string
		// from is the stream seq of the first evaluation of alpha that can
		// no longer be trusted.
		from uint64
	}{
		{
			name: "altered reason", golden: "tampered.golden", from: uint64(at + 1),
			tamper: func(lines [][]byte) ([][]byte, [][]byte) {
				lines[at] = bytes.Replace(lines[at], []byte(`"reason":"local_mutation tool write_file"`), []byte(`"reason":"approved by the board"`), 1)
				return lines, orig
			},
		},
		{
			name: "removed event", from: uint64(at + 1),
			tamper: func(lines [][]byte) ([][]byte, [][]byte) {
				// Remove the observation after the altered step: the next
				// event of alpha is then out of position.
				next := at + 1 + slices.IndexFunc(lines[at+1:], func(l []byte) bool { return bytes.Contains(l, []byte(`"run":"alpha"`)) })
				cut := func(ls [][]byte) [][]byte { return append(slices.Clone(ls[:next]), ls[next+1:]...) }
				return cut(lines), cut(orig)
			},
		},
		{
			name: "undecodable event", from: uint64(at + 1),
			tamper: func(lines [][]byte) ([][]byte, [][]byte) {
				lines[at] = []byte(`{"v":1,"id":"x","run":"alpha","body":`)
				return lines, orig
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, subjects := tt.tamper(slices.Clone(orig))
			r := check(t, loadAs(t, subjects, lines), baseline(), replay.Selection{}, replay.Options{Operators: operators(t, 1)})
			if tt.golden != "" {
				golden(t, tt.golden, r.text())
			}
			if r.sum.Tampered != 1 || len(r.sum.Breaks) != 1 || r.sum.Breaks[0].Run != "alpha" {
				t.Fatalf("tampered %d, breaks %+v, want 1 break in alpha", r.sum.Tampered, r.sum.Breaks)
			}
			if r.sum.Clean() {
				t.Error("summary clean with a tampered run")
			}
			alphaAfter := 0
			for _, res := range r.results {
				switch {
				case res.Run == "alpha" && res.StreamSeq >= tt.from:
					alphaAfter++
					if res.Verdict != replay.NotCheckable || res.Cause != replay.Tampered {
						t.Errorf("alpha step %d @%d: got %s %s, want not_checkable tampered", res.Step, res.StreamSeq, res.Verdict, res.Cause)
					}
				case res.Verdict != replay.Same:
					t.Errorf("%s step %d @%d: got %s (%s), want same", res.Run, res.Step, res.StreamSeq, res.Verdict, res.Reason)
				}
			}
			if alphaAfter < 3 {
				t.Errorf("alpha evaluations reported after the break: got %d, want at least 3", alphaAfter)
			}
		})
	}
}

func TestCheck_ForgedGrantIsReported(t *testing.T) {
	lines := fixture(t, "grants.jsonl")
	log := load(t, lines)
	t.Run("configured operator", func(t *testing.T) {
		r := check(t, log, baseline(), replay.Selection{}, replay.Options{Operators: operators(t, 1)})
		golden(t, "grants.golden", r.text())
		var got []replay.GrantVerdict
		for _, g := range r.grants {
			got = append(got, g.Verdict)
		}
		want := []replay.GrantVerdict{replay.GrantInvalid, replay.GrantInvalid, replay.GrantValid}
		if !slices.Equal(got, want) {
			t.Errorf("grant verdicts: got %v, want %v", got, want)
		}
		if r.sum.GrantsInvalid != 2 || r.sum.Clean() {
			t.Errorf("summary: %+v, want 2 invalid grants and not clean", r.sum)
		}
		if r.sum.ConsumedInvalid != 0 {
			t.Errorf("consumed invalid: got %d, want 0 (the runtime refused both forgeries)", r.sum.ConsumedInvalid)
		}
		causes := map[string]replay.Cause{}
		for _, res := range r.results {
			if res.Cause != "" {
				causes[res.Run] = res.Cause
			}
		}
		if causes["golf"] != replay.Recovery || causes["hotel"] != replay.SpecNotRecorded {
			t.Errorf("not checkable causes: got %v, want golf recovery and hotel spec_not_recorded", causes)
		}
	})
	t.Run("grant by a key the auditor does not trust", func(t *testing.T) {
		r := check(t, log, baseline(), replay.Selection{}, replay.Options{Operators: operators(t, 3)})
		if r.sum.GrantsValid != 0 || r.sum.GrantsInvalid != 3 {
			t.Errorf("grants valid %d invalid %d, want 0 and 3", r.sum.GrantsValid, r.sum.GrantsInvalid)
		}
		if r.sum.ConsumedInvalid != 1 {
			t.Errorf("consumed invalid: got %d, want 1 (foxtrot's send ran on the grant)", r.sum.ConsumedInvalid)
		}
	})
	t.Run("no operators", func(t *testing.T) {
		r := check(t, log, baseline(), replay.Selection{}, replay.Options{})
		if r.sum.GrantsUnverified != 2 || r.sum.GrantsInvalid != 1 {
			t.Errorf("grants unverified %d invalid %d, want 2 and 1 (the wrong hash)", r.sum.GrantsUnverified, r.sum.GrantsInvalid)
		}
	})
}

func TestCheck_Selection(t *testing.T) {
	lines := fixture(t, "fleet.jsonl")
	log := load(t, lines)
	evs := evaluations(t, lines)
	mid := evs[len(evs)/2].seq
	second := func(run string) evaluation {
		for _, ev := range evs {
			if ev.run == run && ev.step == 2 {
				return ev
			}
		}
		t.Fatalf("no step 2 in %s", run)
		return evaluation{}
	}
	tests := []struct {
		name string
		sel  replay.Selection
		keep func(evaluation) bool
	}{
		{"one run", replay.Selection{Runs: []string{"bravo"}}, func(ev evaluation) bool { return ev.run == "bravo" }},
		{"two runs", replay.Selection{Runs: []string{"charlie", "bravo"}}, func(ev evaluation) bool { return ev.run != "alpha" }},
		{"from the middle", replay.Selection{FromSeq: mid}, func(ev evaluation) bool { return ev.seq >= mid }},
		{"up to the middle", replay.Selection{ToSeq: mid}, func(ev evaluation) bool { return ev.seq <= mid }},
		{"one run from the middle", replay.Selection{Runs: []string{"alpha"}, FromSeq: mid}, func(ev evaluation) bool { return ev.run == "alpha" && ev.seq >= mid }},
		{"a tool", replay.Selection{Tool: "read_file"}, func(ev evaluation) bool { return ev.tool == "read_file" }},
		{"since a time", replay.Selection{Since: eventTime(t, lines, second("bravo").seq)}, func(ev evaluation) bool { return ev.seq >= second("bravo").seq }},
		{"until a time", replay.Selection{Until: eventTime(t, lines, second("bravo").seq)}, func(ev evaluation) bool { return ev.seq <= second("bravo").seq }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := check(t, log, baseline(), tt.sel, replay.Options{})
			var want []uint64
			for _, ev := range evs {
				if tt.keep(ev) {
					want = append(want, ev.seq)
				}
			}
			var got []uint64
			for _, res := range r.results {
				got = append(got, res.StreamSeq)
				if res.Verdict != replay.Same {
					t.Errorf("%s step %d @%d: got %s (%s), want same: the view is folded from the run's start", res.Run, res.Step, res.StreamSeq, res.Verdict, res.Reason)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) || len(want) == 0 {
				t.Errorf("evaluations reported at stream seqs %v, want %v", got, want)
			}
		})
	}
}

func TestCheck_UnknownRunIsAnError(t *testing.T) {
	log := load(t, fixture(t, "fleet.jsonl"))
	_, err := replay.Audit(t.Context(), log, baseline(), replay.Selection{Runs: []string{"zulu"}}, replay.Options{}, nil)
	if !errors.Is(err, events.ErrNoRun) {
		t.Errorf("got %v, want an error wrapping events.ErrNoRun", err)
	}
}

func TestCheck_MemoryFollowsRunsInFlight(t *testing.T) {
	r := check(t, load(t, fixture(t, "fleet.jsonl")), baseline(), replay.Selection{}, replay.Options{})
	// alpha waits while bravo runs and ends, then charlie: never more than
	// two runs in flight.
	if r.sum.PeakRuns != 2 {
		t.Errorf("peak runs held: got %d, want 2", r.sum.PeakRuns)
	}
}

func TestCheck_StopsAtCallbackError(t *testing.T) {
	log := load(t, fixture(t, "fleet.jsonl"))
	stop := errors.New("enough")
	n := 0
	_, err := replay.Audit(t.Context(), log, baseline(), replay.Selection{}, replay.Options{}, func(replay.Result) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("got %v after %d results, want the callback's error after 1", err, n)
	}
}

// panicky panics on every request for one tool.
type panicky struct {
	policy.IdentifiedPolicy
	tool string
}

func (p panicky) Evaluate(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	if req.Tool.Name == p.tool {
		panic("bad rule")
	}
	return p.IdentifiedPolicy.Evaluate(ctx, req, v)
}

func TestCheck_PolicyPanicIsAnErrorOutcome(t *testing.T) {
	log := load(t, fixture(t, "fleet.jsonl"))
	r := check(t, log, panicky{baseline(), "write_file"}, replay.Selection{Tool: "write_file"}, replay.Options{})
	if len(r.results) != 1 {
		t.Fatalf("results: got %d, want 1", len(r.results))
	}
	res := r.results[0]
	if res.Replayed == nil || res.Replayed.Outcome != events.OutcomeError || res.Change != replay.Narrows {
		t.Errorf("got %s %s replayed %+v, want different narrows with outcome %q", res.Verdict, res.Change, res.Replayed, events.OutcomeError)
	}
}

// viewKeeper records the views (as JSON, taken while it decides: a policy
// must not keep the view itself) and the requests it is handed.
type viewKeeper struct {
	policy.IdentifiedPolicy
	views [][]byte
	reqs  []policy.Request
}

func (k *viewKeeper) Evaluate(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return policy.Ruling{}, err
	}
	k.views, k.reqs = append(k.views, b), append(k.reqs, req)
	return k.IdentifiedPolicy.Evaluate(ctx, req, v)
}

func TestCheck_HandsThePolicyTheViewBeforeItsEvent(t *testing.T) {
	lines := fixture(t, "fleet.jsonl")
	log := load(t, lines)
	k := &viewKeeper{IdentifiedPolicy: baseline()}
	check(t, log, k, replay.Selection{Runs: []string{"alpha"}}, replay.Options{})
	var want []projector.View
	var v projector.View
	for _, line := range lines {
		e, _ := events.Decode(line)
		if e.Run != "alpha" {
			continue
		}
		if e.Kind == events.StepPolicy || e.Kind == events.ApprovalRequested {
			want = append(want, v.Clone())
		}
		if d, _ := events.DecodeBody[events.StepDecidedBody](e); e.Kind == events.StepDecided && d.Policy != nil {
			// A carried result was asked on the view holding its decision.
			shown := v.Clone()
			d.Policy = nil
			if err := shown.ApplyWith(e, d); err != nil {
				t.Fatal(err)
			}
			want = append(want, shown)
		}
		if err := v.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if len(k.views) != len(want) {
		t.Fatalf("evaluations: got %d, want %d", len(k.views), len(want))
	}
	for i := range want {
		g := k.views[i]
		w, _ := json.Marshal(want[i])
		if !bytes.Equal(g, w) {
			t.Errorf("evaluation %d: view differs from the fold of the events before it\ngot:  %s\nwant: %s", i, g, w)
		}
		if k.reqs[i].Run != "alpha" || k.reqs[i].Tool.Hash == "" || len(k.reqs[i].Args) == 0 {
			t.Errorf("evaluation %d: request %+v lacks its run, spec or args", i, k.reqs[i])
		}
	}
}

func TestCheck_EventThatDoesNotFoldBreaksTheRun(t *testing.T) {
	// Every event chains onto the one before, but the third observes a
	// step that was never decided: a writer that is not the runtime.
	r := newRecorder(t)
	d := r.driver(baseline(), nil)
	read := d.Tools()[0]
	r.append("india", events.RunCreated, events.RunCreatedBody{Tools: d.Tools(), Agent: "script"})
	for step, kind := range []events.Kind{events.StepDecided, events.StepPolicy, events.StepObserved, events.StepPolicy} {
		n := 1
		if step == 2 {
			n = 5
		}
		switch kind {
		case events.StepDecided:
			r.append("india", kind, events.StepDecidedBody{Step: n, Tool: read.Name, Args: `{"path":"x"}`})
		case events.StepPolicy:
			r.append("india", kind, events.PolicyBody{Step: n, Outcome: "allow", Reason: "read_only tool read_file", PolicyID: baselineID, Args: json.RawMessage(`{"path":"x"}`), ToolHash: read.Hash})
		case events.StepObserved:
			r.append("india", kind, events.ObservedBody{Step: n, Kind: events.ObsResult, Content: "ok"})
		}
	}
	rep := check(t, r.log, baseline(), replay.Selection{}, replay.Options{})
	var got []replay.Verdict
	for _, res := range rep.results {
		got = append(got, res.Verdict)
	}
	if want := []replay.Verdict{replay.Same, replay.NotCheckable}; !slices.Equal(got, want) {
		t.Errorf("verdicts: got %v, want %v", got, want)
	}
	if rep.sum.Tampered != 1 || len(rep.sum.Breaks) != 1 || rep.sum.Breaks[0].StreamSeq != 4 {
		t.Errorf("breaks: got %d %+v, want one at stream seq 4", rep.sum.Tampered, rep.sum.Breaks)
	}
}

func TestCheck_ShardedLogReadsEveryShard(t *testing.T) {
	lines := fixture(t, "fleet.jsonl")
	log := loadInto(t, events.Config{Shards: 3}, lines, lines)
	r := check(t, log, baseline(), replay.Selection{}, replay.Options{Operators: operators(t, 1)})
	want := len(evaluations(t, lines))
	if r.sum.Same != want || !r.sum.Clean() || r.sum.Events != uint64(len(lines)) {
		t.Errorf("summary: %+v, want all %d evaluations the same from %d events", r.sum, want, len(lines))
	}
	one := check(t, log, baseline(), replay.Selection{Runs: []string{"alpha"}}, replay.Options{})
	if one.sum.Same != 6 || one.sum.Evaluations != 6 {
		t.Errorf("alpha alone: %d same of %d, want 6 of 6", one.sum.Same, one.sum.Evaluations)
	}
}

func TestCheck_StopsWhenContextIsCancelled(t *testing.T) {
	log := load(t, fixture(t, "fleet.jsonl"))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := replay.Audit(ctx, log, baseline(), replay.Selection{}, replay.Options{}, func(replay.Result) error {
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

// vandal writes through everything it is handed before deciding.
type vandal struct{ policy.IdentifiedPolicy }

func (p vandal) Evaluate(ctx context.Context, req policy.Request, v projector.View) (policy.Ruling, error) {
	d, err := p.IdentifiedPolicy.Evaluate(ctx, req, v)
	for i := range req.Args {
		req.Args[i] = 'X'
	}
	for i := range req.Tool.Schema {
		req.Tool.Schema[i] = 'X'
	}
	for i := range v.Run.Tools {
		v.Run.Tools[i].Hash, v.Run.Tools[i].SideEffect = "", events.Destructive
	}
	for i := range v.Approvals {
		v.Approvals[i].Hash, v.Approvals[i].State = "", projector.Pending
		for j := range v.Approvals[i].Capability {
			v.Approvals[i].Capability[j] = 'X'
		}
	}
	v.Steps = projector.Steps{}
	return d, err
}

func TestCheck_PolicyWritingThroughItsViewChangesNothing(t *testing.T) {
	lines := fixture(t, "fleet.jsonl")
	r := check(t, load(t, lines), vandal{baseline()}, replay.Selection{}, replay.Options{Operators: operators(t, 1)})
	if want := len(evaluations(t, lines)); r.sum.Same != want || !r.sum.Clean() {
		t.Errorf("summary: %+v, want all %d evaluations the same", r.sum, want)
	}
}

// TestCheck_LogsFromBeforeCarriedResults: a log recorded before decisions
// carried their policy results (ADR 0017: a step.policy event after each
// decision) still replays: every evaluation re-checks as the same under
// the policy that recorded it, and a widened policy is seen at exactly the
// steps it widens.
func TestCheck_LogsFromBeforeCarriedResults(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "fleet-before-0017.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	evs := evaluations(t, lines)
	for _, ev := range evs {
		if ev.kind == events.StepDecided {
			t.Fatalf("the fixture from before ADR 0017 holds a carried result at @%d", ev.seq)
		}
	}
	r := check(t, load(t, lines), baseline(), replay.Selection{}, replay.Options{Operators: operators(t, 1)})
	if r.sum.Same != len(evs) || r.sum.Evaluations != len(evs) || !r.sum.Clean() {
		t.Errorf("same %d of %d evaluations (want all %d), summary %+v", r.sum.Same, r.sum.Evaluations, len(evs), r.sum)
	}
	p, opts := changed(events.RemoteMutation, events.Allow)
	opts.Operators = operators(t, 1)
	r = check(t, load(t, lines), p, replay.Selection{}, opts)
	want := 0
	for _, ev := range evs {
		if ev.class == events.RemoteMutation && ev.body.Consumes == "" && ev.body.Outcome == events.RequireApproval {
			want++
		}
	}
	if want == 0 || r.sum.Widens != want {
		t.Errorf("remote mutation allowed: widens %d, want %d", r.sum.Widens, want)
	}
}
