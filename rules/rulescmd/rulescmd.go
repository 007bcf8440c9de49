// Package rulescmd is `arbiter policy`: check, test and diff rules files.
// It owns the command lines and their output; the analysis is package
// rules'. It must not touch the log or the network.
package rulescmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/rules"
)

// Errors that end a command with exit status 1 (after its report).
var (
	ErrFindings = errors.New("the file has findings")
	ErrFailed   = errors.New("cases failed")
	ErrWidening = errors.New("the change widens what runs")
)

// UsageError is a mistake in the command line (exit status 2).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usage is the one-line synopsis.
const Usage = "check FILE | test FILE CASES | diff OLD NEW"

// Run runs `arbiter policy args…`, writing its report to out.
func Run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return &UsageError{"policy: want a subcommand: " + Usage}
	}
	switch args[0] {
	case "check":
		return check(args[1:], out)
	case "test":
		return test(ctx, args[1:], out)
	case "diff":
		return diff(args[1:], out)
	case "-h", "--help", "help":
		fmt.Fprintln(out, "usage: arbiter policy "+Usage)
		return flag.ErrHelp
	}
	return &UsageError{fmt.Sprintf("policy: unknown subcommand %q (want check, test or diff)", args[0])}
}

func parse(name, synopsis string, nargs int, args []string, out io.Writer, extra func(*flag.FlagSet)) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet("policy "+name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() { fmt.Fprintf(out, "usage: arbiter policy %s %s\n", name, synopsis); fs.PrintDefaults() }
	if extra != nil {
		extra(fs)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, &UsageError{err.Error()}
	}
	if fs.NArg() != nargs {
		return nil, &UsageError{fmt.Sprintf("policy %s: want %s", name, synopsis)}
	}
	return fs, nil
}

func check(args []string, out io.Writer) error {
	var strict bool
	fs, err := parse("check", "[--strict] FILE", 1, args, out, func(fs *flag.FlagSet) {
		fs.BoolVar(&strict, "strict", false, "exit 1 on warnings too")
	})
	if err != nil {
		return err
	}
	p, err := rules.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	fs0 := rules.Lint(p)
	for _, f := range fs0 {
		fmt.Fprintln(out, f)
	}
	fmt.Fprintf(out, "%s: %d policies, %d rules, default %s, %d findings; id %s\n",
		fs.Arg(0), len(p.File().Policies), countRules(p), p.Default(), len(fs0), p.PolicyID())
	if strict && len(fs0) > 0 {
		return ErrFindings
	}
	return nil
}

func countRules(p *rules.Policy) int {
	n := 0
	for _, ps := range p.File().Policies {
		n += len(ps.Rules)
	}
	return n
}

func test(ctx context.Context, args []string, out io.Writer) error {
	fs, err := parse("test", "FILE CASES", 2, args, out, nil)
	if err != nil {
		return err
	}
	p, err := rules.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	cases, err := rules.LoadCases(fs.Arg(1))
	if err != nil {
		return err
	}
	res, err := rules.RunCases(ctx, p, cases)
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range res {
		if r.Problem != "" {
			failed++
			fmt.Fprintf(out, "FAIL %s:%d %s: %s\n", fs.Arg(1), r.Line, r.Name, r.Problem)
			continue
		}
		fmt.Fprintf(out, "ok   %s:%d %s: %s\n", fs.Arg(1), r.Line, r.Name, r.Want)
	}
	fmt.Fprintf(out, "%d cases, %d failed\n", len(res), failed)
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d", ErrFailed, failed, len(res))
	}
	return nil
}

func diff(args []string, out io.Writer) error {
	var toolsFile string
	fs, err := parse("diff", "[--tools TABLE] OLD NEW", 2, args, out, func(fs *flag.FlagSet) {
		fs.StringVar(&toolsFile, "tools", "", "a case table whose tools: the diff is made exact over them, as a worker composing the file with the default side-effect mapping decides them")
	})
	if err != nil {
		return err
	}
	old, err := rules.Load(fs.Arg(0))
	if err != nil {
		return err
	}
	new, err := rules.Load(fs.Arg(1))
	if err != nil {
		return err
	}
	cs := rules.Diff(old, new)
	if toolsFile != "" {
		table, err := rules.LoadCases(toolsFile)
		if err != nil {
			return err
		}
		if len(table.Tools) == 0 {
			return &UsageError{fmt.Sprintf("policy diff: --tools %s lists no tools", toolsFile)}
		}
		specs := make([]events.ToolSpec, len(table.Tools))
		for i, t := range table.Tools {
			specs[i] = t.Spec()
		}
		cs = rules.DiffOver(old, new, policy.DefaultSideEffects(), specs)
	}
	for _, c := range cs {
		fmt.Fprintln(out, c)
	}
	fmt.Fprintf(out, "%d changes; %s → %s\n", len(cs), old.PolicyID(), new.PolicyID())
	if rules.Widening(cs) {
		return ErrWidening
	}
	return nil
}
