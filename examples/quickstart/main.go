// Command quickstart is Arbiter end to end in one process, written the way
// an application would: a tool with a JSON Schema, a policy, an agent that
// ends its run with an answer, a worker of a fleet on an embedded
// JetStream (in a temporary directory), and a client that starts the run,
// grants the approval the policy asks for, and waits for the answer.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// refund is a tool: its schema is checked before the policy sees a call.
type refund struct{}

func (refund) Spec() driver.Spec {
	return driver.Spec{
		Name:        "refund",
		Description: "refund an order",
		Schema: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["order","amount"],
			"properties":{"order":{"type":"string"},"amount":{"type":"number","exclusiveMinimum":0}}}`),
		SideEffect: events.RemoteMutation,
		Timeout:    5 * time.Second,
	}
}

func (refund) Execute(_ context.Context, args json.RawMessage) (string, error) {
	var a refundArgs
	if err := json.Unmarshal(args, &a); err != nil {
		return "", err
	}
	return fmt.Sprintf("refunded %.2f on order %s", a.Amount, a.Order), nil
}

type refundArgs struct {
	Order  string  `json:"order"`
	Amount float64 `json:"amount"`
}

// refunds is the policy: a refund over 100 waits for an operator.
type refunds struct{}

func (refunds) Evaluate(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
	var a refundArgs
	if err := json.Unmarshal(req.Args, &a); err != nil {
		return policy.Ruling{}, err
	}
	if a.Amount > 100 {
		return policy.NeedApproval("large_refund", "refunds over 100 need an operator", a, a)
	}
	return policy.Ruling{Outcome: events.Allow, Reason: "a small refund"}, nil
}

// refunder is the agent: it asks for the refund its input names, then
// ends the run with what the tool said.
func refunder(_ context.Context, in driver.StepInput) (driver.Action, error) {
	if last, ok := in.Steps.Last(); ok && last.Observation != nil {
		return driver.Action{Final: &driver.Answer{Text: last.Observation.Content}}, nil
	}
	return driver.Action{Tool: "refund", Args: in.Run.Input}, nil
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "arbiter-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{Dir: dir})
	if err != nil {
		return err
	}
	defer srv.Stop()
	nc, err := srv.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	c, err := client.Setup(ctx, js, client.Config{})
	if err != nil {
		return err
	}

	operator, err := nkeys.CreateUser() // an operator's signing key
	if err != nil {
		return err
	}
	pub, _ := operator.PublicKey()
	d, err := driver.New(driver.Config{
		Log:       c.Log(),
		Policy:    policy.WithID(refunds{}, "refunds v1"),
		Tools:     []driver.Tool{refund{}},
		Operators: map[string]string{pub: "quickstart operator"},
	})
	if err != nil {
		return err
	}
	w, err := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: c.Queue(),
		Agents: map[string]driver.Agent{"refunder": driver.AgentFunc(refunder)}})
	if err != nil {
		return err
	}
	wctx, stop := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() { worked <- w.Run(wctx) }()
	defer func() { stop(); <-worked }()

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.WaitAgent(ctx, "refunder"); err != nil { // the worker says so as it starts
		return err
	}
	started, err := c.Start(ctx, client.StartOptions{ID: "refund-A-1", Agent: "refunder", Input: json.RawMessage(`{"order":"A-1","amount":250}`)})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "started run %s (limits: %s)\n", started.Run, driver.DescribeLimits(started.Limits))
	a, err := c.WaitApproval(ctx, started.Run)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "waiting for an operator: %s (%s %s)\n", a.Reason, a.Tool, a.Args)
	if _, err := c.Grant(ctx, operator, started.Run, a.ID, "checked the order"); err != nil {
		return err
	}
	fmt.Fprintln(out, "granted")
	r, err := c.Wait(ctx, started.Run)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "run %s: %s: %s\n", r.ID, r.Status, r.Result)
	recs, err := c.Events(ctx, started.Run)
	if err != nil {
		return err
	}
	kinds := make([]string, len(recs))
	for i, rec := range recs {
		kinds[i] = string(rec.Event.Kind)
	}
	fmt.Fprintf(out, "its events (hash chain verified): %s\n", strings.Join(kinds, " "))
	return nil
}
