package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// shout is a tool whose remote effect the default policy sends to an
// operator.
type shout struct{}

func (shout) Spec() driver.Spec {
	return driver.Spec{Name: "shout", Description: "say something out loud",
		Schema:     json.RawMessage(`{"type":"object","required":["text"],"properties":{"text":{"type":"string"}}}`),
		SideEffect: events.RemoteMutation, Timeout: time.Second}
}

func (shout) Execute(_ context.Context, args json.RawMessage) (string, error) {
	var a struct{ Text string }
	err := json.Unmarshal(args, &a)
	return "shouted " + a.Text, err
}

// fleetOf runs a one-worker fleet on an embedded JetStream in a temporary
// directory and returns a client of it, an operator key its worker
// accepts, and what stops it all.
func fleetOf(agent driver.Agent) (*client.Client, nkeys.KeyPair, func(), error) {
	dir, err := os.MkdirTemp("", "arbiter-client-example-")
	if err != nil {
		return nil, nil, nil, err
	}
	srv, err := embedded.Start(embedded.Config{Dir: dir})
	if err != nil {
		return nil, nil, nil, err
	}
	nc, _ := srv.Connect()
	js, _ := jetstream.New(nc)
	stopAll := func() { nc.Close(); srv.Stop(); os.RemoveAll(dir) }
	ctx := context.Background()
	c, err := client.Setup(ctx, js, client.Config{})
	if err != nil {
		stopAll()
		return nil, nil, nil, err
	}
	key, _ := nkeys.CreateUser()
	pub, _ := key.PublicKey()
	d, err := driver.New(driver.Config{Log: c.Log(), Policy: policy.WithID(policy.DefaultSideEffects(), "side effects"),
		Tools: []driver.Tool{shout{}}, Operators: map[string]string{pub: "example operator"}})
	if err != nil {
		stopAll()
		return nil, nil, nil, err
	}
	w, _ := fleet.NewWorker(fleet.WorkerConfig{Driver: d, Queue: c.Queue(), Agents: map[string]driver.Agent{"shouter": agent}})
	wctx, stop := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() { worked <- w.Run(wctx) }()
	if err := c.WaitAgent(ctx, "shouter"); err != nil {
		stop()
		<-worked
		stopAll()
		return nil, nil, nil, err
	}
	return c, key, func() { stop(); <-worked; stopAll() }, nil
}

// shouter shouts its input, then answers with what the tool said.
var shouter = driver.AgentFunc(func(_ context.Context, in driver.StepInput) (driver.Action, error) {
	if last, ok := in.Steps.Last(); ok && last.Observation != nil {
		return driver.Action{Final: &driver.Answer{Text: last.Observation.Content}}, nil
	}
	args, _ := json.Marshal(map[string]json.RawMessage{"text": in.Run.Input})
	return driver.Action{Tool: "shout", Args: args}, nil
})

// A run started by a client, driven by a worker, paused by the policy on
// its remote effect until an operator grants it, and waited for.
func Example() {
	c, key, stop, err := fleetOf(shouter)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()
	run, err := c.Start(ctx, client.StartOptions{ID: "hello", Agent: "shouter", Input: json.RawMessage(`"hello"`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	a, err := c.WaitApproval(ctx, run.Run)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("waiting on", a.Kind, a.Tool, string(a.Args))
	if _, err := c.Grant(ctx, key, run.Run, a.ID, "fine by me"); err != nil {
		fmt.Println(err)
		return
	}
	r, err := c.Wait(ctx, run.Run)
	fmt.Println(r.Status, r.Result, err)
	// Output:
	// waiting on remote_mutation shout {"text":"hello"}
	// COMPLETED shouted hello <nil>
}

// Limits are recorded with the run: zero takes the default, NoLimit asks
// for none.
func ExampleClient_Start() {
	c, _, stop, err := fleetOf(shouter)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	st, err := c.Start(context.Background(), client.StartOptions{ID: "long", Agent: "shouter", Input: json.RawMessage(`"on and on"`),
		Limits: events.Limits{MaxSteps: driver.NoLimit, MaxElapsedMS: 60_000}})
	fmt.Println(st.Run, driver.DescribeLimits(st.Limits), err)
	// Output:
	// long no step limit, 5 failures in a row, 5 repeats, 60000 ms <nil>
}

// A denial ends the run without running the call: Wait says it has no
// answer, and the row says why.
func ExampleClient_Deny() {
	c, key, stop, err := fleetOf(shouter)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()
	ctx := context.Background()
	run, _ := c.Start(ctx, client.StartOptions{ID: "loud", Agent: "shouter", Input: json.RawMessage(`"LOUD"`)})
	a, _ := c.WaitApproval(ctx, run.Run)
	if _, err := c.Deny(ctx, key, run.Run, a.ID, "too loud"); err != nil {
		fmt.Println(err)
		return
	}
	r, err := c.Wait(ctx, run.Run)
	fmt.Println(r.Status, r.Reason, errors.Is(err, client.ErrNoAnswer))
	// Output:
	// CANCELLED approval_denied true
}
