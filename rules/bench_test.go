package rules_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/testkit"
)

// hundredRules is a file of 100 rules in 10 policies, of which applying
// target the tool "read" (and all have a condition that holds for it); the
// others name other tools. Every rule audits, so each applying rule is
// recorded and the side-effect default decides: the most a decision can
// cost for that many rules.
func hundredRules(applying int) string {
	var b strings.Builder
	b.WriteString("version: 1\npolicies:\n")
	for p := 0; p < 10; p++ {
		fmt.Fprintf(&b, "  - id: p%d\n    type: tool_access\n    priority: %d\n    enforcement: {mode: audit}\n    rules:\n", p, p)
		for r := 0; r < 10; r++ {
			n := p*10 + r
			pattern := fmt.Sprintf("other_%d_*", n)
			if n%(100/applying) == 0 {
				pattern = "rea*"
			}
			cond := fmt.Sprintf("args.n < %d && tool.side_effect == 'read_only'", 1000+n)
			fmt.Fprintf(&b, "      - {id: r%d, action: deny, target: {type: tool, pattern: %q}, condition: %q, code: C%d}\n", n, pattern, cond, n)
		}
	}
	return b.String()
}

// BenchmarkDecide is one decision of a 100-rule file where 10, and where
// all 100, rules apply. p50-ns is the median of the timed decisions.
func BenchmarkDecide(b *testing.B) {
	// A recorded spec always carries its hash (the driver sets it).
	tool := events.ToolSpec{Name: "read", SideEffect: events.ReadOnly, Schema: json.RawMessage(`{}`), Hash: "b1e5"}
	for _, applying := range []int{10, 100} {
		p, err := rules.Parse("bench.yaml", []byte(hundredRules(applying)))
		if err != nil {
			b.Fatal(err)
		}
		req, v := request(tool, `{"n":7,"path":"notes.txt"}`, nil, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		d, err := p.Evaluate(context.Background(), req, v)
		if err != nil || d.Outcome != events.Allow || len(d.Parts) != applying+1 {
			b.Fatalf("decision %s with %d parts (%v), want allow with %d", d.Outcome, len(d.Parts), err, applying+1)
		}
		b.Run(fmt.Sprintf("rules=100/applying=%d", applying), func(b *testing.B) {
			benchDecisions(b, p, req, v)
		})
		if applying == 10 {
			// As the worker runs it: composed with the side-effect policy.
			c, err := policy.Compose(policy.WithID(policy.DefaultSideEffects(), "side-effects"), p)
			if err != nil {
				b.Fatal(err)
			}
			b.Run("rules=100/applying=10/composed", func(b *testing.B) { benchDecisions(b, c, req, v) })
		}
	}
	se := policy.DefaultSideEffects()
	req, v := request(tool, `{"n":7,"path":"notes.txt"}`, nil, time.Time{})
	b.Run("side-effects", func(b *testing.B) { benchDecisions(b, se, req, v) })
}

func benchDecisions(b *testing.B, p policy.Policy, req policy.Request, v projector.View) {
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := p.Evaluate(ctx, req, v); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
}

// BenchmarkStep drives runs of 100 steps on an embedded JetStream with the
// default side-effect policy; with the 100-rule file whose 10 conditions
// for the tool never hold (recorded=1: the default's part); with the file
// whose 10 rules apply and are audited (recorded=11: each recorded on every
// step); and with that file composed with the side-effect policy as the
// worker does: the cost a rules file adds to a step, side by side in one run;
// and with a policy that answers that composition's ruling without
// evaluating anything (answer/recorded=13), for profiles of the record alone.
func BenchmarkStep(b *testing.B) {
	env := testkit.JetStream(b)
	log := env.Log(b, events.Config{})
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	read.Result = func(context.Context, json.RawMessage) (string, error) { return "ok", nil }
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	rp, err := rules.Parse("bench.yaml", []byte(hundredRules(10)))
	if err != nil {
		b.Fatal(err)
	}
	// The same file with conditions that never hold: ten conditions are
	// evaluated on every step, and only the default's part is recorded.
	quiet, err := rules.Parse("quiet.yaml", []byte(strings.ReplaceAll(hundredRules(10), "args.n <", "args.n >")))
	if err != nil {
		b.Fatal(err)
	}
	se := policy.WithID(policy.DefaultSideEffects(), "side-effects")
	composed, err := policy.Compose(se, rp)
	if err != nil {
		b.Fatal(err)
	}
	quietComposed, err := policy.Compose(se, quiet)
	if err != nil {
		b.Fatal(err)
	}
	// The composed ruling answered as is (see BenchmarkStepRatio): what
	// recording its 13 parts costs, with nothing evaluated.
	canned, err := composed.Evaluate(context.Background(), policy.Request{Run: "r", Step: 1,
		Tool: events.ToolSpec{Name: "read", SideEffect: events.ReadOnly, Hash: "h"}, Args: json.RawMessage(`{"n":1}`)}, projector.View{})
	if err != nil || len(canned.Parts) != 13 {
		b.Fatalf("composed ruling %+v, %v: want 13 parts", canned, err)
	}
	const steps = 100
	for _, c := range []struct {
		name string
		p    policy.Policy
	}{{"side-effects", se}, {"rules/recorded=1", quiet}, {"rules/recorded=11", rp}, {"rules+side-effects/recorded=13", composed},
		{"rules+side-effects/quiet/recorded=3", quietComposed}, {"answer/recorded=13", policy.WithID(answer{canned}, composed.PolicyID())}} {
		d, err := driver.New(driver.Config{Log: log, Policy: c.p, Tools: []driver.Tool{read, done},
			Limits: events.Limits{MaxSteps: steps + 1, MaxRepeats: steps + 1}})
		if err != nil {
			b.Fatal(err)
		}
		b.Run("policy="+c.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				r, err := d.Create(ctx, events.NewID(), "bench", nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := d.Drive(ctx, r, testkit.Counter{Tool: "read", Steps: steps}); err != nil {
					b.Fatal(err)
				}
				if st := r.View().Run.Status; st != projector.Completed {
					b.Fatalf("run ended %s %s", st, r.View().Run.Reason)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*steps), "ns/step")
		})
	}
}

// BenchmarkStepRatio drives, in turn, one 100-step run under the
// side-effect policy, one under the 100-rule file composed with it as the
// worker does (10 rules applying and audited: each recorded on every
// step), and one under the same composition where the 10 conditions never
// hold (evaluated on every step, nothing recorded but the default), and
// reports each one's time per step and the ratios to the first, in wall
// time and in CPU time; beside them a run whose policy answers, without
// evaluating anything, the ruling the audited composition gives (13
// parts), which tells the record's cost from the evaluation's. Taking
// turns within one benchmark keeps a noisy machine's drift out of the
// ratios, which sub-benchmarks run one after the other do not; the turns
// start with a different policy each round.
func BenchmarkStepRatio(b *testing.B) {
	env := testkit.JetStream(b)
	log := env.Log(b, events.Config{})
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	read.Result = func(context.Context, json.RawMessage) (string, error) { return "ok", nil }
	done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
	se := policy.WithID(policy.DefaultSideEffects(), "side-effects")
	ps := []policy.Policy{se}
	for _, doc := range []string{hundredRules(10), strings.ReplaceAll(hundredRules(10), "args.n <", "args.n >")} {
		rp, err := rules.Parse("bench.yaml", []byte(doc))
		if err != nil {
			b.Fatal(err)
		}
		composed, err := policy.Compose(se, rp)
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, composed)
	}
	// The composed audited policy's ruling for a step, answered as is:
	// the same record, nothing evaluated. What the step costs beyond the
	// side-effect run is then the record's (recorded-ratio), and what the
	// audited run costs beyond this is the evaluation's.
	req := policy.Request{Run: "r", Step: 1, Tool: events.ToolSpec{Name: "read", SideEffect: events.ReadOnly, Hash: "h"}, Args: json.RawMessage(`{"n":1}`)}
	canned, err := ps[1].Evaluate(context.Background(), req, projector.View{})
	if err != nil || len(canned.Parts) != 13 {
		b.Fatalf("composed ruling %+v, %v: want 13 parts", canned, err)
	}
	ps = append(ps, policy.WithID(answer{canned}, policy.ID(ps[1])))
	const steps = 100
	ds := make([]*driver.Driver, len(ps))
	for i, p := range ps {
		var err error
		if ds[i], err = driver.New(driver.Config{Log: log, Policy: p, Tools: []driver.Tool{read, done},
			Limits: events.Limits{MaxSteps: steps + 1, MaxRepeats: steps + 1}}); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	spent := make([]time.Duration, len(ds))
	cpu := make([]time.Duration, len(ds))
	heap := make([]uint64, len(ds))
	b.ReportAllocs()
	// Each round takes the next of every order of the runs, so that each
	// run follows each other one equally often: what a run leaves (its
	// garbage, collected during the next; the server's read buffer, sized
	// by the messages before) is paid for by the next. Turning one order
	// round (i+j mod 4) left each run behind the same one in three rounds
	// of four: whichever policy followed the quiet run allocated 2.5 KB a
	// step more, in whichever slot it was.
	orders := permutations(len(ds))
	for i := 0; i < b.N; i++ {
		for _, k := range orders[i%len(orders)] {
			d := ds[k]
			h0 := allocated()
			t0, c0 := time.Now(), cpuTime()
			r, err := d.Create(ctx, events.NewID(), "bench", nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := d.Drive(ctx, r, testkit.Counter{Tool: "read", Steps: steps}); err != nil {
				b.Fatal(err)
			}
			spent[k] += time.Since(t0)
			cpu[k] += cpuTime() - c0
			heap[k] += allocated() - h0 // read outside the times: it stops the world
			if st := r.View().Run.Status; st != projector.Completed {
				b.Fatalf("run ended %s %s", st, r.View().Run.Reason)
			}
		}
	}
	perStep := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*steps) }
	b.ReportMetric(perStep(spent[0]), "side-effects-ns/step")
	b.ReportMetric(perStep(spent[1]), "rules-ns/step")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "ratio")
	b.ReportMetric(float64(spent[2])/float64(spent[0]), "quiet-ratio")
	// The same ratios in CPU time (the process's, user and system, the
	// embedded server's included): what the step costs, which a loaded
	// machine inflates in wall time by how long the process waits for a
	// core.
	b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cpu-ratio")
	b.ReportMetric(float64(cpu[2])/float64(cpu[0]), "quiet-cpu-ratio")
	b.ReportMetric(float64(spent[3])/float64(spent[0]), "recorded-ratio")
	b.ReportMetric(float64(cpu[3])/float64(cpu[0]), "recorded-cpu-ratio")
	// What each allocates a step (the embedded server's allocations
	// included): steadier than any time on a shared machine, and what the
	// collections a step pays for grow with.
	perStepB := func(n uint64) float64 { return float64(n) / float64(b.N*steps) }
	b.ReportMetric(perStepB(heap[0]), "side-effects-B/step")
	b.ReportMetric(perStepB(heap[1]), "rules-B/step")
	b.ReportMetric(perStepB(heap[2]), "quiet-B/step")
	b.ReportMetric(perStepB(heap[3]), "recorded-B/step")
}

// allocated is the bytes the process has allocated on the heap so far,
// exactly (runtime/metrics' count lags by what the processors' caches
// hold).
func allocated() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// permutations returns every order of 0..n-1, each followed by the
// next in lexicographic order.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for at := 0; at <= len(p); at++ {
			q := append(append(append([]int{}, p[:at]...), n-1), p[at:]...)
			out = append(out, q)
		}
	}
	slices.SortFunc(out, slices.Compare[[]int])
	return out
}

// answer is a policy that gives the same ruling every time (its parts a
// fresh copy, as a policy that builds them would hand over).
type answer struct{ d policy.Ruling }

func (a answer) Evaluate(context.Context, policy.Request, projector.View) (policy.Ruling, error) {
	d := a.d
	d.Parts = slices.Clone(d.Parts)
	return d, nil
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
