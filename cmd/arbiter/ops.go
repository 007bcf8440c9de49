package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/visible"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nkeys"
	"golang.org/x/term"
)

func newFlags(name, args, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: arbiter %s %s\n\n%s\n\nflags:\n", name, args, help)
		fs.PrintDefaults()
	}
	return fs
}

func helpOf(name string) (args, help string) {
	for _, c := range commands {
		if c.name == name {
			return c.args, c.help
		}
	}
	return "", ""
}

// setup parses a command's flags and connects.
func setup(ctx context.Context, name string, args []string, extra func(*flag.FlagSet), pos ...string) (*conn, []string, error) {
	a, h := helpOf(name)
	fs := newFlags(name, a, h)
	c := &conn{role: "operator"}
	if name == "start" || name == "cancel" {
		c.role = "worker"
	}
	c.flags(fs)
	if extra != nil {
		extra(fs)
	}
	rest, err := parse(fs, args, pos...)
	if err != nil {
		return nil, nil, err
	}
	if err := c.open(ctx); err != nil {
		return nil, nil, err
	}
	return c, rest, nil
}

// readRun reads and folds run, saying plainly when its events do not
// verify or fold.
func readRun(ctx context.Context, c *conn, run string) (projector.View, []events.Record, error) {
	v, recs, err := c.cl.Read(ctx, run)
	if errors.Is(err, client.ErrBroken) {
		return v, recs, fmt.Errorf("run %s is BROKEN: its stored events are not one hash chain ending at the log's last message for it, or do not fold (one was altered, removed, inserted or copied), so no worker drives it and nothing of it executes: %w", run, err)
	}
	return v, recs, err
}

func runShow(ctx context.Context, args []string, out io.Writer) error {
	c, pos, err := setup(ctx, "show", args, nil, "RUN")
	if err != nil {
		return err
	}
	defer c.close()
	v, _, err := readRun(ctx, c, pos[0])
	if err != nil {
		return err
	}
	r := v.Run
	fmt.Fprintf(out, "run %s: %s %s %s\n", r.ID, r.Status, r.Reason, r.Detail)
	fmt.Fprintf(out, "  agent %q, %d steps, %d failures in a row, created %s\n", r.Agent, r.Steps, r.FailuresInRow, r.Created.Format(time.RFC3339))
	fmt.Fprintf(out, "  limits: %s\n", driver.DescribeLimits(r.Limits))
	if r.Result != "" {
		fmt.Fprintf(out, "  result: %s\n", r.Result)
	}
	if m := v.Model; m.Replies > 0 || m.Open != nil || m.Used.Calls > 0 {
		u := m.Charged()
		fmt.Fprintf(out, "  model: %d calls (%d replies), %d input and %d output tokens, $%.6f\n", u.Calls, m.Replies, u.InputTokens, u.OutputTokens, float64(u.SpendNanoUSD)/1e9)
	}
	for s := range v.Steps.All() {
		line := fmt.Sprintf("  step %d: %s %s", s.N, s.Decision.Tool, clip(string(s.Decision.RawArgs()), 60))
		if s.Policy != nil {
			line += fmt.Sprintf(" -> %s (%s)", s.Policy.Outcome, s.Policy.Reason)
		}
		if s.Observation != nil {
			line += fmt.Sprintf(" -> %s: %s", s.Observation.Kind, clip(s.Observation.Content, 60))
		}
		fmt.Fprintln(out, line)
	}
	for _, a := range v.Approvals {
		showApproval(out, r.ID, a)
	}
	return nil
}

func showApproval(out io.Writer, run string, a projector.Approval) {
	fmt.Fprintf(out, "  approval %s (step %d) %s: kind %s\n", a.ID, a.Step, a.State, a.Kind)
	fmt.Fprintf(out, "    reason:     %s\n", fenced(a.Reason))
	if a.Kind == events.BudgetApproval {
		u := a.Raise
		fmt.Fprintf(out, "    raises the model budget by: %d calls, %d input tokens, %d output tokens, $%.6f\n", u.Calls, u.InputTokens, u.OutputTokens, float64(u.SpendNanoUSD)/1e9)
	} else {
		fmt.Fprintf(out, "    request:    %s %s\n", fenced(a.Tool), fenced(string(a.Args)))
		if visible.NonASCII(a.Tool) || visible.NonASCII(string(a.Args)) {
			// A character that passes for another (a Cyrillic "а" for a
			// Latin "a") makes two requests look alike: say so, and show
			// the request with each of them escaped.
			fmt.Fprintf(out, "    note:       the request holds characters outside ASCII, and some look like others; with each escaped:\n")
			fmt.Fprintf(out, "    as ASCII:   %s %s\n", fenced(visible.ASCII(a.Tool)), fenced(visible.ASCII(string(a.Args))))
		}
	}
	fmt.Fprintf(out, "    capability: %s\n", fenced(string(a.Capability)))
	fmt.Fprintf(out, "    presentation (may contain content the model chose; do not follow instructions in it):\n      %s\n", fenced(string(a.Presentation)))
	fmt.Fprintf(out, "    hash:       %s\n", a.Hash)
	if a.ExpiresAt != nil {
		fmt.Fprintf(out, "    expires:    %s\n", a.ExpiresAt.Format(time.RFC3339))
	}
	if a.Decision != nil {
		fmt.Fprintf(out, "    decision:   %s by %s (%s)\n", a.Decision.Decision, a.Decision.Operator, fenced(a.Decision.Reason))
	}
}

// fenced is s with every line after its first marked as the field's
// continuation ("      | "): text a policy or the model chose may hold
// line breaks, and a line of its own must never read as a field of the
// prompt (a second "request:" or "hash:" line).
func fenced(s string) string {
	if !strings.ContainsAny(s, "\n\r") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.ReplaceAll(s, "\n", "\n      | ")
}

func runEvents(ctx context.Context, args []string, out io.Writer) error {
	var raw, follow bool
	c, pos, err := setup(ctx, "events", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&raw, "json", false, "print each stored event as JSON, one per line")
		fs.BoolVar(&follow, "follow", false, "keep printing the run's events as they are stored, until it ends")
	}, "RUN")
	if err != nil {
		return err
	}
	defer c.close()
	_, recs, err := readRun(ctx, c, pos[0])
	if err != nil && (len(recs) == 0 || !errors.Is(err, projector.ErrFold)) {
		return err
	}
	if raw {
		for _, r := range recs {
			fmt.Fprintf(out, "%s\n", r.Data)
		}
		return nil
	}
	fmt.Fprintf(out, "run %s: %d events, hash chain verified to the log's last message for the run\n", pos[0], len(recs))
	printTrace(out, recs)
	if follow && len(recs) > 0 && !recs[len(recs)-1].Event.Kind.Terminal() {
		return c.cl.Follow(ctx, pos[0], recs[len(recs)-1].Tail(), func(r events.Record) error {
			printTrace(out, []events.Record{r})
			return nil
		})
	}
	return nil
}

func runApprovals(ctx context.Context, args []string, out io.Writer) error {
	c, _, err := setup(ctx, "approvals", args, nil)
	if err != nil {
		return err
	}
	defer c.close()
	list, err := c.cl.Approvals(ctx)
	if err != nil {
		return err
	}
	n, unreadable := 0, 0
	for _, w := range list {
		if w.Err != nil {
			// One broken run must not hide the others' approvals.
			fmt.Fprintf(out, "run %s: UNREADABLE: %v\n", w.Run, w.Err)
			unreadable++
			continue
		}
		fmt.Fprintf(out, "run %s:\n", w.Run)
		showApproval(out, w.Run, w.Approval)
		n++
	}
	fmt.Fprintf(out, "%d approval(s) waiting\n", n)
	if unreadable > 0 {
		return fmt.Errorf("%d run(s) with approvals could not be read (their events do not verify); nothing of them will execute", unreadable)
	}
	return nil
}

func runGrant(ctx context.Context, args []string, out io.Writer) error {
	return decide(ctx, "grant", events.DecisionGrant, args, out)
}

func runDeny(ctx context.Context, args []string, out io.Writer) error {
	return decide(ctx, "deny", events.DecisionDeny, args, out)
}

// decide signs and records an operator's decision. At a terminal it shows
// the request and asks; in a script it needs --yes.
func decide(ctx context.Context, name, decision string, args []string, out io.Writer) error {
	var keyFile, reason string
	var yes bool
	c, pos, err := setup(ctx, name, args, func(fs *flag.FlagSet) {
		fs.StringVar(&keyFile, "key", "", "operator key: a file holding an nkeys user seed (SU…); see `arbiter keygen`")
		fs.StringVar(&reason, "reason", "", "why, recorded with the decision")
		fs.BoolVar(&yes, "yes", false, "decide without asking (required when not at a terminal)")
	}, "RUN", "APPROVAL")
	if err != nil {
		return err
	}
	defer c.close()
	kp, err := operatorKey(keyFile)
	if err != nil {
		return err
	}
	run, id := pos[0], pos[1]
	v, _, err := readRun(ctx, c, run)
	if err != nil {
		return err
	}
	a := v.Approval(id)
	if a == nil {
		return fmt.Errorf("run %s has no approval %s", run, id)
	}
	if a.State != projector.Pending {
		return fmt.Errorf("approval %s is %s, not pending", id, a.State)
	}
	if !yes {
		showApproval(out, run, *a)
		if !isTerminal(os.Stdin) {
			return usageError{"not at a terminal: pass --yes to " + name + " without being asked"}
		}
		fmt.Fprintf(out, "%s approval %s of run %s? [y/N] ", name, id, run)
		var answer string
		_, _ = fmt.Fscanln(os.Stdin, &answer)
		if answer != "y" && answer != "yes" {
			return fmt.Errorf("not confirmed; nothing recorded")
		}
	}
	// Signed over the hash shown (or read) here: if the approval changed
	// since, nothing is signed.
	d, err := c.cl.Decide(ctx, kp, run, id, client.Decision{Decision: decision, Reason: reason, Hash: a.Hash})
	if err != nil {
		return err
	}
	if d.Unnudged != nil {
		fmt.Fprintf(out, "published, but %v; a worker will see it on its next look at the run\n", d.Unnudged)
	}
	fmt.Fprintf(out, "%s of approval %s published as decision %d (signed by %s); a worker verifies and records it\n", decision, id, d.Seq, d.Operator)
	return nil
}

func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

func runWatch(ctx context.Context, args []string, out io.Writer) error {
	var durable, state string
	var asJSON bool
	c, _, err := setup(ctx, "watch", args, func(fs *flag.FlagSet) {
		fs.StringVar(&durable, "durable", "", "resume where this name left off: shorthand for --state <data>/watch/NAME.json")
		fs.StringVar(&state, "state", "", "file keeping where the watch stands, to resume there (default: print everything from the start)")
		fs.BoolVar(&asJSON, "json", false, "print each event as JSON")
	})
	if err != nil {
		return err
	}
	defer c.close()
	if state, err = watchState(c.data, durable, state); err != nil {
		return err
	}
	return c.cl.WatchApprovals(ctx, state, func(n approvals.Notice) error {
		if asJSON {
			b, _ := json.Marshal(n.Event)
			fmt.Fprintf(out, "%s\n", b)
			return nil
		}
		fmt.Fprintf(out, "%s run %s %-18s %s\n", n.Event.Time.Format(time.RFC3339), n.Event.Run, n.Event.Kind, summary(n.Event))
		return nil
	})
}

func runStart(ctx context.Context, args []string, out io.Writer) error {
	var o client.StartOptions
	var input string
	var elapsed time.Duration
	var who actorFlags
	c, _, err := setup(ctx, "start", args, func(fs *flag.FlagSet) {
		fs.StringVar(&o.Agent, "agent", "", "the agent that drives the run (a name in the workers' config)")
		fs.StringVar(&input, "input", "", "the run's input: JSON, or text (recorded as a JSON string)")
		fs.StringVar(&o.ID, "id", "", "run id (default: a new ULID); the same start again with the same id only nudges the fleet again")
		fs.BoolVar(&o.Force, "force", false, "start the run even when no live worker offers the agent (it fails no_agent unless one appears)")
		fs.IntVar(&o.Limits.MaxSteps, "max-steps", 0, fmt.Sprintf("step limit (0: the default, %d; -1: none)", driver.DefaultLimits.MaxSteps))
		fs.IntVar(&o.Limits.MaxFailuresInRow, "max-failures", 0, fmt.Sprintf("failed steps in a row before the run fails (0: the default, %d; -1: none)", driver.DefaultLimits.MaxFailuresInRow))
		fs.IntVar(&o.Limits.MaxRepeats, "max-repeats", 0, fmt.Sprintf("the same request with the same result in a row before the run fails (0: the default, %d; -1: none)", driver.DefaultLimits.MaxRepeats))
		fs.DurationVar(&elapsed, "max-elapsed", 0, "time limit from creation (0: none)")
		who.register(fs)
	})
	if err != nil {
		return err
	}
	defer c.close()
	if o.Agent == "" {
		return usageError{"--agent is required"}
	}
	if elapsed < 0 {
		return usageError{fmt.Sprintf("--max-elapsed %s: want a positive duration, or 0 for none", elapsed)}
	}
	o.Limits.MaxElapsedMS = elapsed.Milliseconds()
	if o.Actor, err = who.actor(); err != nil {
		return err
	}
	o.Surface = who.surface
	if input != "" {
		o.Input = inputJSON(input)
	}
	st, err := c.cl.Start(ctx, o)
	switch {
	case errors.Is(err, client.ErrNoAgent):
		return fmt.Errorf("%w. Start a worker with that agent, or pass --force", err)
	case err != nil:
		return err
	case st.Again:
		fmt.Fprintf(out, "run %s was already recorded as asked; nudged the fleet again (agent %s%s; limits: %s)\n", st.Run, o.Agent, startedAs(events.RunCreatedBody{Actor: st.Actor, Surface: st.Surface}), driver.DescribeLimits(st.Limits))
	default:
		fmt.Fprintf(out, "started run %s (agent %s%s; limits: %s)\n", st.Run, o.Agent, startedAs(events.RunCreatedBody{Actor: st.Actor, Surface: st.Surface}), driver.DescribeLimits(st.Limits))
	}
	return nil
}

// inputJSON is a run's input from --input: JSON as it is, any other text
// as a JSON string (what a model agent reads as its task).
func inputJSON(s string) json.RawMessage {
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s) // a string always encodes
	return b
}

func runResult(ctx context.Context, args []string, out io.Writer) error {
	var wait bool
	var timeout, every time.Duration
	c, pos, err := setup(ctx, "result", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&wait, "wait", false, "wait until the run ends, wherever it is driven")
		fs.DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait: the longest wait")
		fs.DurationVar(&every, "poll", 250*time.Millisecond, "with --wait: how often to read the run")
	}, "RUN")
	if err != nil {
		return err
	}
	defer c.close()
	var r projector.Run
	if wait {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		r, err = c.cl.WithPoll(every).Wait(ctx, pos[0])
	} else {
		r, err = c.cl.Result(ctx, pos[0])
		if errors.Is(err, client.ErrNotEnded) {
			err = fmt.Errorf("%w (use --wait)", err)
		}
	}
	if errors.Is(err, client.ErrBroken) {
		_, _, err = readRun(ctx, c, pos[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(out, r.Result)
	return nil
}

func runCancel(ctx context.Context, args []string, out io.Writer) error {
	var reason string
	c, pos, err := setup(ctx, "cancel", args, func(fs *flag.FlagSet) {
		fs.StringVar(&reason, "reason", "", "why, recorded with the cancellation")
	}, "RUN")
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.cl.Cancel(ctx, pos[0], reason); err != nil {
		return err
	}
	fmt.Fprintf(out, "cancelled run %s\n", pos[0])
	return nil
}

func runKeygen(_ context.Context, args []string, out io.Writer) error {
	a, h := helpOf("keygen")
	fs := newFlags("keygen", a, h)
	file := fs.String("out", "", "file to write the seed to (mode 0600; must not exist)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return usageError{"--out FILE is required"}
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	f, err := os.OpenFile(*file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(seed, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(out, "operator key written to %s\npublic key (put it in the workers' config under operators): %s\n", *file, pub)
	return nil
}

// operatorKey reads the operator's seed from file: the key that signs
// decisions (`arbiter keygen` writes one).
func operatorKey(file string) (nkeys.KeyPair, error) {
	if file == "" {
		return nil, usageError{"--key FILE is required: the operator key (an nkeys user seed, SU…) that signs decisions"}
	}
	seed, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return nil, fmt.Errorf("operator key %s: %w", file, err)
	}
	return kp, nil
}
