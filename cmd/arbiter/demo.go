package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/scripted"
	"github.com/arbiter-run/arbiter/toolbox"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// runDemo drives one run end to end on an embedded JetStream: a malformed
// request refused, a read allowed, a destructive call denied, a remote call
// paused for approval, a grant signed with a demo operator key, the resume,
// completion.
func runDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	data := fs.String("data", "", "data directory for the embedded JetStream and the tools' sandbox (default: a temporary directory, removed afterwards)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir := *data
	if dir == "" {
		tmp, err := os.MkdirTemp("", "arbiter-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	sandbox := filepath.Join(dir, "sandbox")
	if err := os.MkdirAll(sandbox, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(sandbox, "notes.txt"), []byte("remember to tell ops the deploy is done"), 0o644); err != nil {
		return err
	}

	srv, err := embedded.Start(embedded.Config{Dir: filepath.Join(dir, "jetstream")})
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
	log, err := events.Open(ctx, js, events.Config{})
	if err != nil {
		return err
	}

	operator, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	opPub, _ := operator.PublicKey()
	var tools []driver.Tool
	for _, name := range []string{"read_file", "delete_file", "send_email", "finish"} {
		t, err := toolbox.New(name, sandbox, "", 0)
		if err != nil {
			return err
		}
		tools = append(tools, t)
	}
	d, err := driver.New(driver.Config{
		Log:       log,
		Policy:    policy.WithID(policy.DefaultSideEffects(), "side-effects default"),
		Tools:     tools,
		Operators: approvals.Operators{opPub: "demo operator"},
	})
	if err != nil {
		return err
	}
	agent := scripted.Agent{Decisions: []driver.Action{
		scripted.Call("read_file", `{"path": "notes.txt"`),
		scripted.Call("read_file", `{"path": "notes.txt"}`),
		scripted.Call("delete_file", `{"path": "notes.txt"}`),
		scripted.Call("send_email", `{"to": "ops@example.com", "body": "the deploy is done"}`),
		scripted.Call("finish", `{"summary": "told ops"}`),
	}}

	id := "demo-" + events.NewID()
	fmt.Fprintf(out, "Arbiter demo: run %s on an embedded JetStream in %s\n", id, dir)
	fmt.Fprintf(out, "policy %q: read_only and local_mutation allowed, remote_mutation needs approval, destructive denied\n\n", policy.ID(d.Policy()))
	run, err := d.Create(ctx, id, "demo-script", nil)
	if err != nil {
		return err
	}
	if err := d.Drive(ctx, run, agent); err != nil {
		return err
	}
	v := run.View()
	a := v.PendingApproval()
	if a == nil {
		return fmt.Errorf("demo: run %s is %s, expected it to wait for approval", id, v.Run.Status)
	}
	fmt.Fprintf(out, "run is %s on approval %s (%s)\n", v.Run.Status, a.ID, a.Kind)
	fmt.Fprintf(out, "  request (bound by the hash): %s %s\n", a.Tool, a.Args)
	fmt.Fprintf(out, "  presentation (content the model may have chosen): %s\n", a.Presentation)
	fmt.Fprintf(out, "the demo operator %.12s… signs a grant over hash %.16s…\n\n", opPub, a.Hash)

	// No fleet here: the demo drives the run itself, so nobody is nudged.
	if _, err := client.New(log, nil).Grant(ctx, operator, id, a.ID, "demo: looks right"); err != nil {
		return err
	}
	if err := d.Drive(ctx, run, agent); err != nil {
		return err
	}

	recs, _, err := log.Read(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "events of run %s (hash chain verified on read):\n", id)
	printTrace(out, recs)
	v = run.View()
	fmt.Fprintf(out, "\nrun %s: %s %s, result %q\n", id, v.Run.Status, v.Run.Reason, v.Run.Result)
	ledger, err := toolbox.Ledger(sandbox)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "tools executed %d times (delete_file never):\n", len(ledger))
	for _, l := range ledger {
		fmt.Fprintf(out, "  %s\n", l)
	}
	if v.Run.Status != "COMPLETED" {
		return fmt.Errorf("demo: run ended %s %s", v.Run.Status, v.Run.Reason)
	}
	return nil
}
