package testkit

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
)

// SeedEnv names the environment variable that replaces [Never]'s default
// seed (decimal or 0x-prefixed hex), to explore other requests or replay a
// report from another seed.
const SeedEnv = "ARBITER_NEVER_SEED"

// DefaultSeed is the seed [Never] uses unless [SeedEnv] is set, so that a
// run fails or passes the same way every time.
const DefaultSeed uint64 = 0x6172_6269_7465_72

// neverRun is the run id Never hands the policy, and the id of its default
// view.
const neverRun = "never"

// Never holds outcome off every tool of side-effect class class: for each
// such tool it draws n argument documents from the tool's schema with
// [GenerateArgs], keeps those the tool's own [driver.CompiledTool.CheckArgs]
// accepts (dropping repeats), asks p about each under every view (a fresh
// RUNNING run with the tools recorded when none is given) and fails t with
// one table of every request p answered with outcome.
//
// A request p cannot decide (an error, an outcome outside the four, or a
// require_approval the runtime could not record) is in the table too: the
// runtime would fail the run on it.
//
// Each tool draws from its own stream, rand.NewPCG(seed, FNV-1a of its
// name), so its documents do not depend on the other tools. The seed is
// [DefaultSeed] or [SeedEnv]'s value, and is logged and printed with any
// failure. t also fails when the class has no tools, when n is not
// positive or outcome is not one of the four, and for a tool where fewer than half the generated documents
// pass its Check (the generator could not satisfy its schema).
func Never(t testing.TB, p policy.Policy, tools []driver.Tool, class events.SideEffect, outcome events.Outcome, n int, views ...projector.View) {
	t.Helper()
	switch {
	case p == nil:
		t.Fatalf("testkit.Never: nil policy")
		return
	case n <= 0:
		t.Fatalf("testkit.Never: %d requests per tool (want at least 1)", n)
		return
	case !outcome.Valid():
		t.Fatalf("testkit.Never: outcome %q is not one a policy gives (want one of allow, deny, abort, require_approval)", outcome)
		return
	}
	seed, err := neverSeed()
	if err != nil {
		t.Fatalf("testkit.Never: %v", err)
		return
	}
	set, err := compileTools(tools)
	if err != nil {
		t.Fatalf("testkit.Never: %v", err)
		return
	}
	if len(views) == 0 {
		views = []projector.View{freshView(neverRun, set.records)}
	}
	t.Logf("testkit.Never: seed %d (set %s to change it)", seed, SeedEnv)
	var tab table
	tested, undecidedN := 0, 0
	for _, ct := range set.order {
		if ct.Spec.SideEffect != class {
			continue
		}
		tested++
		docs, bad := generate(ct, seed, n)
		if bad != "" {
			t.Errorf("testkit.Never: seed %d: the generator could not satisfy the schema of tool %q: %s", seed, ct.Spec.Name, bad)
		}
		for _, args := range docs {
			for vi, v := range views {
				req := policy.Request{Run: neverRun, Step: 1, Tool: ct.Record, Args: args}
				got, kind, detail := evaluate(t.Context(), p, req, v)
				if got == outcome || got == undecided {
					tab.add(ct.Spec.Name, strconv.Itoa(vi), gotOutcome(got, kind), detail, string(args))
				}
				if got == undecided {
					undecidedN++
				}
			}
		}
	}
	if tested == 0 {
		t.Errorf("testkit.Never: no tool of class %q to check; the %d tools given (%s) have classes %s", class, len(set.order), set.names(), classesPresent(set))
		return
	}
	if tab.len() > 0 {
		what := fmt.Sprintf("%d requests to %s tools answered %s", tab.len()-undecidedN, class, outcome)
		if undecidedN > 0 {
			what += fmt.Sprintf(" and %d were not decided", undecidedN)
		}
		t.Errorf("testkit.Never: seed %d: %s:\n%s", seed, what, tab.render("tool", "view", "got", "detail", "args"))
	}
}

// generate draws n documents for ct and returns the distinct ones its Check
// accepts, in PolicyJSON form. bad explains a pass rate under one half.
func generate(ct *driver.CompiledTool, seed uint64, n int) (docs [][]byte, bad string) {
	h := fnv.New64a()
	h.Write([]byte(ct.Spec.Name))
	r := rand.New(rand.NewPCG(seed, h.Sum64()))
	seen := map[string]bool{}
	passed := 0
	var first error
	for range n {
		doc, err := GenerateArgs(ct.Record.Schema, r)
		if err == nil {
			doc, err = ct.CheckArgs(doc)
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		passed++
		if !seen[string(doc)] {
			seen[string(doc)] = true
			docs = append(docs, doc)
		}
	}
	if 2*passed < n {
		bad = fmt.Sprintf("%d of %d generated documents passed its Check (first refusal: %v)", passed, n, first)
	}
	return docs, bad
}

func neverSeed() (uint64, error) {
	s, ok := os.LookupEnv(SeedEnv)
	if !ok || s == "" {
		return DefaultSeed, nil
	}
	seed, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not a seed (want an unsigned integer, decimal or 0x hex)", SeedEnv, s)
	}
	return seed, nil
}

// classesPresent lists the side-effect classes the tools have, for a
// message about a class with none.
func classesPresent(set *toolSet) string {
	var cs []events.SideEffect
	for _, ct := range set.order {
		if !slices.Contains(cs, ct.Spec.SideEffect) {
			cs = append(cs, ct.Spec.SideEffect)
		}
	}
	if len(cs) == 0 {
		return "none"
	}
	return fmt.Sprint(cs)
}
