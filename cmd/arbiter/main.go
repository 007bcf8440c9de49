// Command arbiter is Arbiter's operator command: run the demo, list and show
// runs, read their events, start and cancel runs, and decide approvals.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/arbiter-run/arbiter/internal/visible"
)

type command struct {
	name, args, help string
	run              func(ctx context.Context, args []string, out io.Writer) error
}

var commands []command

func init() {
	commands = []command{
		{"demo", "[--data DIR]", "run the end-to-end demo on an embedded JetStream and print the run's events", runDemo},
		{"runs", "[--status S] [--agent A] [--after CURSOR]", "list runs newest first, a page at a time, with the console's filters", runRuns},
		{"show", "RUN", "show a run: its row, steps and approvals", runShow},
		{"events", "RUN [--follow]", "print a run's events as a readable trace and verify its hash chain", runEvents},
		{"approvals", "", "list approvals waiting for a decision", runApprovals},
		{"grant", "RUN APPROVAL --key FILE", "grant an approval, signed with an operator key", runGrant},
		{"deny", "RUN APPROVAL --key FILE [--reason R]", "deny an approval, signed with an operator key", runDeny},
		{"watch", "[--durable NAME]", "print approval events as they happen", runWatch},
		{"start", "--agent NAME [--input TEXT|JSON] [--id RUN] [--actor A] [--force]", "start a run and nudge the fleet to drive it", runStart},
		{"result", "RUN [--wait]", "print a completed run's result (its final answer)", runResult},
		{"cancel", "RUN [--reason R]", "cancel a run", runCancel},
		{"policy", "check|test|diff FILE…", "check, test and diff rules files (exit 1 on a failed case or a widening diff)", runPolicy},
		{"shadow", "RUN | --since TIME", "report where the shadow policy would have decided differently (exit 1 if it widens)", runShadow},
		{"console", "--key FILE [--listen ADDR]", "serve the web console: runs, one run's trace, pending approvals live, grant and deny signed with the key", runConsole},
		{"notify", "--webhook URL --secret-file F | --slack URL", "post a notice of each approval request to a signed JSON webhook or a Slack-compatible one", runNotify},
		{"traces", "--otlp URL [--from-start]", "export an OpenTelemetry span per step of every run to an OTLP/HTTP endpoint", runTraces},
		{"keygen", "--out FILE", "create an operator key (an nkeys user seed) and print its public key", runKeygen},
		{"mcp", "tools|pin --config FILE", "review a worker config's MCP tools (class, pin status), or pin them in its lock file", runMCP},
		{"setup", "[--shards K] [--replicas N]", "create or update the streams, work consumer and bucket (as the admin user)", runSetup},
		{"gateway", "--config FILE [--http ADDR] [--run RUN]", "serve the pinned MCP tools of upstream servers to a host, each call decided by the gate", runGateway},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: arbiter COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Arbiter decides, outside the model, whether each tool call an agent asks for runs.")
	fmt.Fprintln(w, "Commands that read or write runs connect to --nats (default nats://127.0.0.1:4222,")
	fmt.Fprintln(w, "where `go run ./cmd/worker` listens). Run `arbiter COMMAND --help` for its flags.")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %-40s %s\n", c.name, c.args, c.help)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command args name, printing on stdout and stderr, and
// returns the process's exit code. Everything a command prints passes
// through visible: text a model or a tool chose (arguments, results,
// presentations, reasons) reaches the operator's terminal as what it is,
// never as a control sequence, a bidirectional override or an invisible
// character that changes what the terminal shows. (The gateway's MCP
// stdio is os.Stdout itself, not this writer.)
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out, errOut := visible.NewWriter(stdout), visible.NewWriter(stderr)
	defer func() {
		_ = out.Flush()
		_ = errOut.Flush()
	}()
	return dispatch(ctx, args, out, errOut)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) < 1 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout)
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			if err != nil {
				fmt.Fprintf(stderr, "arbiter %s: %v\n", c.name, err)
				return exitCode(err)
			}
			return 0
		}
	}
	fmt.Fprintf(stderr, "arbiter: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// usageError marks a mistake in the command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
