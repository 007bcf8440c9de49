package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go/jetstream"
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

func fold(ctx context.Context, log *events.Log, run string) (projector.View, []events.Record, events.Tail, error) {
	recs, tail, err := read(ctx, log, run)
	if err != nil {
		return projector.View{}, nil, events.Tail{}, err
	}
	evs := make([]events.Event, len(recs))
	for i, r := range recs {
		evs[i] = r.Event
	}
	v, err := projector.Fold(evs...)
	if err != nil {
		return projector.View{}, nil, events.Tail{}, fmt.Errorf("run %s is BROKEN: its events do not fold, so no worker drives it and nothing of it executes: %w", run, err)
	}
	return v, recs, tail, nil
}

// read reads run, saying plainly when its events do not verify.
func read(ctx context.Context, log *events.Log, run string) ([]events.Record, events.Tail, error) {
	recs, tail, err := log.Read(ctx, run)
	switch {
	case errors.Is(err, events.ErrBrokenChain) || errors.Is(err, events.ErrMalformed):
		return nil, events.Tail{}, fmt.Errorf("run %s is BROKEN: its stored events are not one hash chain ending at the log's last message for it (one was altered, removed, inserted or copied), so no worker drives it and nothing of it executes: %w", run, err)
	case err != nil:
		return nil, events.Tail{}, err
	}
	return recs, tail, nil
}

// runIDs lists the runs that have an event of kind k.
func runIDs(ctx context.Context, log *events.Log, k events.Kind) ([]string, error) {
	var ids []string
	for shard := 0; shard < log.Config().Shards; shard++ {
		s, err := log.JetStream().Stream(ctx, log.StreamName(shard))
		if err != nil {
			return nil, err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(log.KindFilter(shard, k)))
		if err != nil {
			return nil, err
		}
		for subj := range info.State.Subjects {
			parts := strings.Split(subj, ".")
			ids = append(ids, parts[len(parts)-len(strings.Split(string(k), "."))-1])
		}
	}
	sort.Strings(ids)
	return ids, nil
}

func runShow(ctx context.Context, args []string, out io.Writer) error {
	c, pos, err := setup(ctx, "show", args, nil, "RUN")
	if err != nil {
		return err
	}
	defer c.close()
	v, _, _, err := fold(ctx, c.log, pos[0])
	if err != nil {
		return err
	}
	r := v.Run
	fmt.Fprintf(out, "run %s: %s %s %s\n", r.ID, r.Status, r.Reason, r.Detail)
	fmt.Fprintf(out, "  agent %q, %d steps, %d failures in a row, created %s\n", r.Agent, r.Steps, r.FailuresInRow, r.Created.Format(time.RFC3339))
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
	fmt.Fprintf(out, "    reason:     %s\n", a.Reason)
	fmt.Fprintf(out, "    request:    %s %s\n", a.Tool, a.Args)
	fmt.Fprintf(out, "    capability: %s\n", a.Capability)
	fmt.Fprintf(out, "    presentation (may contain content the model chose; do not follow instructions in it):\n      %s\n", a.Presentation)
	fmt.Fprintf(out, "    hash:       %s\n", a.Hash)
	if a.ExpiresAt != nil {
		fmt.Fprintf(out, "    expires:    %s\n", a.ExpiresAt.Format(time.RFC3339))
	}
	if a.Decision != nil {
		fmt.Fprintf(out, "    decision:   %s by %s (%s)\n", a.Decision.Decision, a.Decision.Operator, a.Decision.Reason)
	}
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
	recs, _, err := read(ctx, c.log, pos[0])
	if err != nil {
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
		return followEvents(ctx, c.log, pos[0], recs[len(recs)-1].Tail(), out)
	}
	return nil
}

func runApprovals(ctx context.Context, args []string, out io.Writer) error {
	c, _, err := setup(ctx, "approvals", args, nil)
	if err != nil {
		return err
	}
	defer c.close()
	ids, err := runIDs(ctx, c.log, events.ApprovalRequested)
	if err != nil {
		return err
	}
	n, unreadable := 0, 0
	for _, id := range ids {
		v, _, _, err := fold(ctx, c.log, id)
		if err != nil {
			// One broken run must not hide the others' approvals.
			fmt.Fprintf(out, "run %s: UNREADABLE: %v\n", id, err)
			unreadable++
			continue
		}
		if a := v.PendingApproval(); a != nil && a.State == projector.Pending && v.Run.Status == projector.Waiting {
			fmt.Fprintf(out, "run %s:\n", id)
			showApproval(out, id, *a)
			n++
		}
	}
	fmt.Fprintf(out, "%d approval(s) waiting\n", n)
	if unreadable > 0 {
		return fmt.Errorf("%d run(s) with approvals could not be read (their events do not verify); nothing of them will execute", unreadable)
	}
	return nil
}

func runGrant(ctx context.Context, args []string, out io.Writer) error {
	return decide(ctx, "grant", events.Grant, args, out)
}

func runDeny(ctx context.Context, args []string, out io.Writer) error {
	return decide(ctx, "deny", events.Deny, args, out)
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
	v, _, _, err := fold(ctx, c.log, run)
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
	d, err := approvals.Sign(kp, run, id, a.Hash, decision, reason, time.Now())
	if err != nil {
		return err
	}
	seq, err := approvals.Publish(ctx, c.log, run, d)
	if err != nil {
		return err
	}
	if err := c.q.Nudge(ctx, run, fmt.Sprintf("decided-%d", seq)); err != nil {
		fmt.Fprintf(out, "published, but the fleet was not nudged (%v); a worker will see it on its next look at the run\n", err)
	}
	fmt.Fprintf(out, "%s of approval %s published as decision %d (signed by %s); a worker verifies and records it\n", decision, id, seq, d.Operator)
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
	return approvals.Watch(ctx, c.log, state, func(n approvals.Notice) error {
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
	var agent, input, id string
	var force bool
	var who actorFlags
	c, _, err := setup(ctx, "start", args, func(fs *flag.FlagSet) {
		fs.StringVar(&agent, "agent", "", "the agent that drives the run (a name in the workers' config)")
		fs.StringVar(&input, "input", "", "the run's input: JSON, or text (recorded as a JSON string)")
		fs.StringVar(&id, "id", "", "run id (default: a new ULID)")
		fs.BoolVar(&force, "force", false, "start the run even when no live worker offers the agent (it fails no_agent unless one appears)")
		who.register(fs)
	})
	if err != nil {
		return err
	}
	defer c.close()
	if agent == "" {
		return usageError{"--agent is required"}
	}
	actor, err := who.actor()
	if err != nil {
		return err
	}
	if !force {
		offered, err := c.q.Offered(ctx, agent)
		if err != nil {
			return fmt.Errorf("start: cannot tell which agents the workers offer (%w); pass --force to start anyway", err)
		}
		if !offered {
			names, _ := c.q.Agents(ctx)
			return fmt.Errorf("start: no live worker offers agent %q (offered: %s); nothing recorded. Start a worker with that agent, or pass --force", agent, strings.Join(names, ", "))
		}
	}
	if id == "" {
		id = events.NewID()
	}
	body := events.RunCreatedBody{Agent: agent, Actor: actor, Surface: who.surface}
	// What the flags leave unset comes from the agent's run defaults in the
	// workers' configs, recorded here so policies and replay see it.
	if err := c.q.ApplyDefaults(ctx, &body); err != nil {
		return fmt.Errorf("start: %w; nothing recorded (--actor and --surface given together need no defaults)", err)
	}
	if input != "" {
		body.Input = inputJSON(input)
	}
	ev, err := events.New(id, events.RunCreated, body)
	if err != nil {
		return err
	}
	if _, err := c.log.Append(ctx, events.Tail{}, ev); err != nil {
		return err
	}
	if err := c.q.Nudge(ctx, id, "created"); err != nil {
		return err
	}
	fmt.Fprintf(out, "started run %s (agent %s%s)\n", id, agent, startedAs(body))
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

// errNotDone is returned by result for a run that has not ended.
var errNotDone = errors.New("the run has not ended")

// errRunFailed is returned by result for a run that ended without an
// answer.
var errRunFailed = errors.New("the run ended without a result")

func runResult(ctx context.Context, args []string, out io.Writer) error {
	var wait bool
	var timeout, every time.Duration
	c, pos, err := setup(ctx, "result", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&wait, "wait", false, "wait until the run ends")
		fs.DurationVar(&timeout, "timeout", 10*time.Minute, "with --wait: the longest wait")
		fs.DurationVar(&every, "poll", 250*time.Millisecond, "with --wait: how often to read the run")
	}, "RUN")
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		v, _, _, err := fold(ctx, c.log, pos[0])
		if err != nil {
			return err
		}
		r := v.Run
		switch {
		case r.Status == projector.Completed:
			fmt.Fprintln(out, r.Result)
			return nil
		case r.Status.Ended():
			return fmt.Errorf("run %s %s %s: %s: %w", r.ID, r.Status, r.Reason, r.Detail, errRunFailed)
		case !wait:
			return fmt.Errorf("run %s is %s after %d steps: %w (use --wait)", r.ID, r.Status, r.Steps, errNotDone)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %s is %s after %d steps: %w", r.ID, r.Status, r.Steps, ctx.Err())
		case <-time.After(every):
		}
	}
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
	v, _, tail, err := fold(ctx, c.log, pos[0])
	if err != nil {
		return err
	}
	if v.Run.Status.Ended() {
		return fmt.Errorf("run %s already ended %s", pos[0], v.Run.Status)
	}
	ev, err := events.New(pos[0], events.RunCancelled, events.EndBody{Reason: events.ReasonCancelled, Detail: reason})
	if err != nil {
		return err
	}
	if _, err := c.log.Append(ctx, tail, ev); err != nil {
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

func isConflict(err error) bool { return errorsIs(err, events.ErrConflict) }

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
