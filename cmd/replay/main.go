// Command replay is the replay audit: it reads recorded runs back from the
// log and re-checks every recorded policy evaluation against the built-in
// side-effect policy (its class mapping set on the command line), verifies
// every recorded operator decision and every run's hash chain, and prints
// what differs. It never runs a tool and never writes to the log.
//
// Exit status: 0 when everything re-checked decides the same (and nothing is
// forged or tampered), 1 when anything differs, 2 on an error.
//
// A consumer whose policy is Go code gets the same audit by calling
// replay.Audit from a main of its own.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/visible"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/arbiter-run/arbiter/rules"
)

// Exit statuses.
const (
	exitSame      = 0
	exitDifferent = 1
	exitError     = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// What replay prints holds what the model and tools chose (arguments,
	// reasons): it reaches the terminal escaped (internal/visible).
	stdout, stderr := visible.NewWriter(os.Stdout), visible.NewWriter(os.Stderr)
	code := run(ctx, os.Args[1:], stdout, stderr)
	_ = stdout.Flush()
	_ = stderr.Flush()
	stop()
	os.Exit(code)
}

const intro = `usage: replay [flags]

Re-checks recorded policy decisions against a policy, without running any tool.
For each recorded evaluation it rebuilds the request (the tool spec by its
recorded hash, the arguments as the policy was handed them) and the run's view
as it stood just before, asks the policy, and compares the outcome, the reason
and, for require_approval, the approval (kind, capability, presentation). It
also verifies every recorded grant and denial against --operator keys, and
every run's hash chain.

Two uses:
  audit    are the recorded decisions the ones this policy makes?
             replay --side-effects ... --policy-id ID
  what-if  what would a changed policy have decided differently?
             replay --side-effects remote_mutation=allow --baseline RECORDED-ID
             replay --rules new.yaml --baseline RECORDED-ID

A worker whose config names no policy id records, for the default mapping,
  side-effects {"destructive":"deny","local_mutation":"allow","read_only":"allow","remote_mutation":"require_approval"}
which is also this command's default id: with no flags it audits such a fleet.

By default it reads the data directory of a worker that runs an embedded
JetStream (--data): through the running worker, at the address it wrote
to <data>/worker.url, with that directory's operator credentials; when no
worker runs there, by starting the store itself, in this process only.

Exit status: 0 everything re-checked is the same; 1 anything differs, a grant
is invalid or a run's history is tampered; 2 an error (bad flags, no
connection).

Flags:
`

// options are the parsed command line.
type options struct {
	conn                 connFlags
	sel                  replay.Selection
	since, until         string
	policyID, baseline   string
	sideEffects          string
	rules                string
	operators            []string
	jsonOut, all, noProg bool
}

// parseFlags parses args. It prints nothing: on --help it returns
// flag.ErrHelp, and the caller prints usage.
func parseFlags(args []string) (*options, *flag.FlagSet, error) {
	o := &options{}
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	o.conn.flags(fs)
	fs.Func("run", "re-check only this run (repeatable)", func(s string) error {
		if err := events.ValidRunID(s); err != nil {
			return err
		}
		o.sel.Runs = append(o.sel.Runs, s)
		return nil
	})
	fs.StringVar(&o.sel.Tool, "tool", "", "re-check only calls to this tool")
	fs.Uint64Var(&o.sel.FromSeq, "from-seq", 0, "first stream sequence to report (0: the start)")
	fs.Uint64Var(&o.sel.ToSeq, "to-seq", 0, "last stream sequence to read (0: the end)")
	fs.StringVar(&o.since, "since", "", "report only evaluations recorded at or after this time (RFC 3339)")
	fs.StringVar(&o.until, "until", "", "report only evaluations recorded at or before this time (RFC 3339)")
	fs.StringVar(&o.sideEffects, "side-effects", "", "side-effect class mapping, entries over the default "+
		mapping(policy.DefaultSideEffects())+"\n(e.g. remote_mutation=allow,destructive=abort)")
	fs.StringVar(&o.rules, "rules", "", "a rules file, composed with the side-effect mapping as a worker whose config names it (policy.rules) runs it")
	fs.StringVar(&o.policyID, "policy-id", "", `the policy's id (default "side-effects {mapping as JSON}", what a worker records for the same mapping when its config names no id)`)
	fs.StringVar(&o.baseline, "baseline", "", "compare with the evaluations recorded by the policy with this id (default: the policy's own id, an audit)")
	fs.Func("operator", "public nkey (U...) of an operator whose signed decisions are valid (repeatable)", func(s string) error {
		if err := approvals.ParseOperator(s); err != nil {
			return err
		}
		o.operators = append(o.operators, s)
		return nil
	})
	fs.BoolVar(&o.jsonOut, "json", false, "print one JSON object per line: each evaluation, each decision, then the summary")
	fs.BoolVar(&o.all, "all", false, "list evaluations that re-checked the same and valid decisions too (default: only what needs a look)")
	fs.BoolVar(&o.noProg, "no-progress", false, "no progress line on a terminal")
	if err := fs.Parse(args); err != nil {
		return nil, fs, err
	}
	if fs.NArg() > 0 {
		return nil, fs, fmt.Errorf("unexpected argument %q (every option is a flag; see --help)", fs.Arg(0))
	}
	var err error
	if o.sel.Since, err = parseTime("since", o.since); err != nil {
		return nil, fs, err
	}
	if o.sel.Until, err = parseTime("until", o.until); err != nil {
		return nil, fs, err
	}
	if o.sel.ToSeq > 0 && o.sel.FromSeq > o.sel.ToSeq {
		return nil, fs, fmt.Errorf("--from-seq %d is after --to-seq %d", o.sel.FromSeq, o.sel.ToSeq)
	}
	return o, fs, nil
}

func parseTime(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s %q: want an RFC 3339 time such as 2026-03-01T09:00:00Z", name, s)
	}
	return t, nil
}

// sideEffectPolicy parses "class=outcome,..." over the default mapping.
func sideEffectPolicy(spec string) (policy.SideEffectPolicy, error) {
	p := policy.DefaultSideEffects()
	if strings.TrimSpace(spec) == "" {
		return p, nil
	}
	for _, entry := range strings.Split(spec, ",") {
		class, outcome, ok := strings.Cut(strings.TrimSpace(entry), "=")
		class, outcome = strings.TrimSpace(class), strings.TrimSpace(outcome)
		switch {
		case !ok:
			return nil, fmt.Errorf("--side-effects: entry %q is not class=outcome", entry)
		case !events.SideEffect(class).Valid():
			return nil, fmt.Errorf("--side-effects: unknown side-effect class %q (want one of %s)", class, classList())
		case !events.Outcome(outcome).Valid():
			return nil, fmt.Errorf("--side-effects: %s=%s: unknown outcome %q (want allow, deny, abort or require_approval)", class, outcome, outcome)
		}
		p[events.SideEffect(class)] = events.Outcome(outcome)
	}
	return p, nil
}

// mapping renders p as the flag takes it.
func mapping(p policy.SideEffectPolicy) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+"="+string(p[events.SideEffect(k)]))
	}
	return strings.Join(parts, ",")
}

// defaultID is the id a worker gives the side-effect policy its config
// names no id for.
func defaultID(p policy.SideEffectPolicy) string {
	b, _ := json.Marshal(p)
	return "side-effects " + string(b)
}

// run is the command: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, fs, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, intro)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return exitSame
	}
	if err != nil {
		fmt.Fprintf(stderr, "replay: %v (replay --help lists the flags)\n", err)
		return exitError
	}
	sep, err := sideEffectPolicy(o.sideEffects)
	if err != nil {
		fmt.Fprintf(stderr, "replay: %v\n", err)
		return exitError
	}
	id := o.policyID
	if id == "" {
		id = defaultID(sep)
	}
	if err := policy.ValidateID(id); err != nil {
		fmt.Fprintf(stderr, "replay: --policy-id: %v\n", err)
		return exitError
	}
	ops := approvals.Operators{}
	for _, k := range o.operators {
		ops[k] = "operator " + k[:8]
	}
	log, closeLog, err := o.conn.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "replay: %v\n", err)
		return exitError
	}
	defer closeLog()

	out := newPrinter(stdout, o.jsonOut, o.all)
	opts := replay.Options{Operators: ops, Baseline: o.baseline, OnGrant: out.grant, OnBudget: out.budget}
	var prog *progress
	if !o.noProg {
		if prog = newProgress(stderr); prog != nil {
			opts.Progress = prog.update
		}
	}
	var checked policy.IdentifiedPolicy = policy.WithID(sep, id)
	if o.rules != "" {
		rp, err := rules.Load(o.rules)
		if err != nil {
			fmt.Fprintf(stderr, "replay: --rules: %v\n", err)
			return exitError
		}
		if checked, err = policy.Compose(checked, rp); err != nil {
			fmt.Fprintf(stderr, "replay: --rules: %v\n", err)
			return exitError
		}
		id = checked.PolicyID()
	}
	sum, err := replay.Audit(ctx, log, checked, o.sel, opts, out.result)
	if prog != nil {
		prog.done()
	}
	if err != nil {
		out.flush()
		fmt.Fprintf(stderr, "replay: %v\n", err)
		return exitError
	}
	code := exitSame
	if !sum.Clean() {
		code = exitDifferent
	}
	against := o.baseline
	if against == "" {
		against = id
	}
	out.summary(sum, id, against, code)
	return code
}

// classList names the side-effect classes, for a message.
func classList() string {
	var cs []string
	for _, c := range events.SideEffects {
		cs = append(cs, string(c))
	}
	return strings.Join(cs, ", ")
}
