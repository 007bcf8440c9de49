package replay_test

import (
	"context"
	"fmt"
	"os"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/replay"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// writeBudget is a consumer's own policy, written in Go: reads are free,
// a run may write at most Max times, and anything else needs an operator. It
// decides from the request and the run view alone, so replay can re-check it
// exactly.
type writeBudget struct{ Max int }

// PolicyID names the policy and everything that changes its decisions.
func (p writeBudget) PolicyID() string { return fmt.Sprintf("write-budget v1 max=%d", p.Max) }

func (p writeBudget) Evaluate(_ context.Context, req policy.Request, view projector.View) (policy.Ruling, error) {
	switch req.Tool.SideEffect {
	case events.ReadOnly:
		return policy.Ruling{Outcome: events.Allow, Reason: "reads are free"}, nil
	case events.LocalMutation:
		writes := 0
		for s := range view.Steps.All() {
			if s.Policy != nil && s.Policy.Outcome == events.Allow && s.Decision.Tool == req.Tool.Name {
				writes++
			}
		}
		if writes >= p.Max {
			return policy.Ruling{Outcome: events.Deny, Reason: fmt.Sprintf("write budget of %d spent", p.Max)}, nil
		}
		return policy.Ruling{Outcome: events.Allow, Reason: "within the write budget"}, nil
	}
	return policy.NeedApproval(string(req.Tool.SideEffect), "needs an operator", nil, nil)
}

// A consumer whose policy is Go code re-checks its recorded runs from a main
// of its own: before raising the write budget from 2 to 3, it asks what the
// new policy would have decided differently on the runs the old one
// recorded.
func Example() {
	ctx := context.Background()
	log, stop, err := exampleLog(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	if err := recordExampleRun(ctx, log, writeBudget{Max: 2}); err != nil {
		fmt.Println(err)
		return
	}

	old, raised := writeBudget{Max: 2}, writeBudget{Max: 3}
	sum, err := replay.Audit(ctx, log, raised, replay.Selection{}, replay.Options{Baseline: old.PolicyID()},
		func(r replay.Result) error {
			line := fmt.Sprintf("step %d %s: %s", r.Step, r.Tool, r.Verdict)
			if r.Verdict == replay.Different {
				line += fmt.Sprintf(" (%s): %s -> %s", r.Change, r.Recorded.Outcome, r.Replayed.Outcome)
			}
			fmt.Println(line)
			return nil
		})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d evaluations: %d same, %d widen; clean: %v\n", sum.Evaluations, sum.Same, sum.Widens, sum.Clean())
	// Output:
	// step 1 write_file: same
	// step 2 write_file: same
	// step 3 write_file: different (widens): deny -> allow
	// step 4 read_file: same
	// 4 evaluations: 3 same, 1 widen; clean: false
}

// exampleLog starts an embedded JetStream in a temporary directory and opens
// the log on it.
func exampleLog(ctx context.Context) (*events.Log, func(), error) {
	dir, err := os.MkdirTemp("", "replay-example")
	if err != nil {
		return nil, nil, err
	}
	srv, err := embedded.Start(embedded.Config{Dir: dir})
	if err != nil {
		return nil, nil, err
	}
	stop := func() { srv.Stop(); os.RemoveAll(dir) }
	nc, err := srv.Connect()
	if err != nil {
		stop()
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		stop()
		return nil, nil, err
	}
	log, err := events.Open(ctx, js, events.Config{})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return log, func() { nc.Close(); stop() }, nil
}

// recordExampleRun drives one run under p: three writes and a read.
func recordExampleRun(ctx context.Context, log *events.Log, p policy.Policy) error {
	path := `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`
	d, err := driver.New(driver.Config{Log: log, Policy: p, Tools: []driver.Tool{
		testkit.NewLedger("write_file", events.LocalMutation, path),
		testkit.NewLedger("read_file", events.ReadOnly, path),
	}})
	if err != nil {
		return err
	}
	run, err := d.Create(ctx, "example", "script", nil)
	if err != nil {
		return err
	}
	return d.Drive(ctx, run, testkit.NewScript(
		testkit.Call("write_file", `{"path": "a"}`),
		testkit.Call("write_file", `{"path": "b"}`),
		testkit.Call("write_file", `{"path": "c"}`),
		testkit.Call("read_file", `{"path": "a"}`),
	))
}
