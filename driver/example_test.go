package driver_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// A scripted agent asks for four things: a malformed read, a read, a
// destructive delete and a remote send. The default side-effect policy
// refuses nothing the schema let through, allows the read, denies the delete
// and pauses the run on the send until an operator decides.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "arbiter-example")
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

	path := `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`
	d, err := driver.New(driver.Config{
		Log:    log,
		Policy: policy.WithID(policy.DefaultSideEffects(), "side-effects v1"),
		Tools: []driver.Tool{
			testkit.NewLedger("read_file", events.ReadOnly, path),
			testkit.NewLedger("delete_file", events.Destructive, path),
			testkit.NewLedger("send_email", events.RemoteMutation, `{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	agent := testkit.NewScript(
		testkit.Call("read_file", `{"path": "notes.txt"`),
		testkit.Call("read_file", `{"path": "notes.txt"}`),
		testkit.Call("delete_file", `{"path": "/"}`),
		testkit.Call("send_email", `{"to": "ops@example.com"}`),
	)
	run, err := d.Create(ctx, "example", "script", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := d.Drive(ctx, run, agent); err != nil {
		fmt.Println(err)
		return
	}
	for s := range run.View().Steps.All() {
		line := fmt.Sprintf("step %d %s:", s.N, s.Decision.Tool)
		if s.Policy != nil {
			line += " policy " + string(s.Policy.Outcome)
		}
		if s.Observation != nil {
			line += " -> " + string(s.Observation.Kind)
		}
		fmt.Println(line)
	}
	v := run.View()
	fmt.Println("run", v.Run.Status, "waiting on", v.PendingApproval().Kind)
	fmt.Println(v.Run.Status == projector.Waiting, strings.HasPrefix(v.Steps.At(0).Observation.Content, "arguments of read_file"))
	// Output:
	// step 1 read_file: -> invalid_decision
	// step 2 read_file: policy allow -> result
	// step 3 delete_file: policy deny -> policy_denied
	// step 4 send_email: policy require_approval
	// run WAITING_FOR_APPROVAL waiting on remote_mutation
	// true true
}
