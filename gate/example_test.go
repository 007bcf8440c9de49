package gate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/nats-io/nats.go/jetstream"
)

// A program with its own loop asks the gate before each call: the read is
// allowed (the program runs it and reports the result), the delete is
// denied with the reason to show the model, the send waits for an
// operator.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "arbiter-gate-example")
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	nc, _ := srv.Connect()
	defer nc.Close()
	js, _ := jetstream.New(nc)
	log, err := events.Open(ctx, js, events.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	tool := func(name string, class events.SideEffect) driver.Spec {
		return driver.Spec{Name: name, SideEffect: class, Timeout: 10 * time.Second,
			Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}
	}
	g, err := gate.New(gate.Config{
		Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "side-effects v1"),
		Tools: []driver.Spec{tool("read_file", events.ReadOnly), tool("delete_file", events.Destructive), tool("upload", events.RemoteMutation)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	run, err := g.Open(ctx, "example", "my-loop", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer run.Close()

	a, _ := run.Ask(ctx, "read_file", json.RawMessage(`{"path": "notes.txt"}`))
	fmt.Println(a.Verdict, string(a.Args))
	done, _ := run.Report(ctx, "ship it", nil) // what the program's own read returned
	fmt.Println(done.Verdict, done.Observation.Content)

	a, _ = run.Ask(ctx, "delete_file", json.RawMessage(`{"path": "/"}`))
	fmt.Println(a.Verdict, a.Observation.Kind)

	a, _ = run.Ask(ctx, "upload", json.RawMessage(`{"path": "notes.txt"}`))
	fmt.Println(a.Verdict, a.Approval.Kind, a.Approval.State)
	// Output:
	// allow {"path":"notes.txt"}
	// done ship it
	// deny policy_denied
	// pending remote_mutation pending
}
