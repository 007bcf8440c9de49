package faulttest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestWorker_ServerKilledAfterAcknowledgedStepKeepsIt kills the JetStream
// server itself, not only a worker: a worker process runs the embedded
// server with --durability machine (every append fsynced before its ack),
// and is SIGKILLed, server and all, as soon as a step of a run is
// acknowledged (readable by another client). Restarted on the same data
// directory, the server holds every event that was read before the kill,
// byte for byte, and the worker drives the run to its end with no call run
// twice (or, when the kill fell between a side effect's allow and its
// observation, to the interrupted_side_effect approval it must wait on). It runs several rounds, killing at a different step each time.
func TestWorker_ServerKilledAfterAcknowledgedStepKeepsIt(t *testing.T) {
	bin := workerBinary(t)
	for _, step := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("after-step-%d", step), func(t *testing.T) {
			serverKillRound(t, bin, step)
		})
	}
}

func serverKillRound(t *testing.T, bin string, killAfter int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sandbox, config := filepath.Join(dir, "sandbox"), filepath.Join(dir, "worker.yaml")
	if err := os.MkdirAll(sandbox, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sandbox, "notes.txt"), []byte("remember the deploy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "sandbox: " + strconv.Quote(sandbox) + "\n" + toolsYAML(events.ReadOnly) + configTail
	if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeLocalAddr(t)
	start := func() *proc {
		t.Helper()
		cmd := exec.Command(bin, "--data", filepath.Join(dir, "data"), "--listen", addr, "--no-auth",
			"--durability", "machine", "--config", config, "--metrics", "", "--ack-wait", "1s", "--concurrency", "1")
		cmd.Dir = dir
		p := &proc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
		cmd.Stderr = p.stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("start worker: %v", err)
		}
		go func() { p.err = cmd.Wait(); close(p.done) }()
		t.Cleanup(p.stop)
		return p
	}
	p := start()
	log, q, d, nc := joinEmbedded(t, ctx, p, addr, sandbox)
	if !strings.Contains(p.stderr.String(), "durability=machine") {
		t.Fatalf("the worker does not say its server fsyncs every append:\n%s", p.tail(2000))
	}
	const run = "power-1"
	if err := q.Start(ctx, d, run, "slow", nil); err != nil {
		t.Fatal(err)
	}
	// Wait for step killAfter's observation to be readable: its ack was
	// sent before, so it is acknowledged; then kill at once.
	var before []events.Record
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs, _, err := log.Read(ctx, run)
		if err == nil && observed(recs, killAfter) {
			before = recs
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("step %d never observed (read: %v):\n%s", killAfter, err, p.tail(2000))
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(10 * time.Second); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("worker with the server: got exit %v, want death by SIGKILL", err)
	}
	nc.Close()

	p = start()
	log, _, d, nc = joinEmbedded(t, ctx, p, addr, sandbox)
	defer nc.Close()
	after, _, err := log.Read(ctx, run)
	if err != nil {
		t.Fatalf("read the run after the restart: %v", err)
	}
	if len(after) < len(before) {
		t.Fatalf("after the server's kill the run has %d events, %d were acknowledged before it", len(after), len(before))
	}
	for i, b := range before {
		if string(after[i].Data) != string(b.Data) {
			t.Fatalf("event %d changed across the server's kill:\nbefore %s\nafter  %s", i+1, b.Data, after[i].Data)
		}
	}
	if err := waitSettled(ctx, d, []string{run}, 60*time.Second); err != nil {
		t.Fatalf("after the restart: %v\n%s", err, p.tail(2000))
	}
	r, err := d.Load(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	// The kill may fall between a side effect's allow and its
	// observation: the run then waits on an operator, as it must.
	switch v := r.View(); {
	case v.Run.Status == projector.Completed:
	case v.Run.Status == projector.Waiting && v.PendingApproval() != nil && v.PendingApproval().Kind == driver.InterruptedSideEffect:
		t.Logf("the kill interrupted step %d (%s): the run waits on an operator", v.PendingApproval().Step, v.PendingApproval().Tool)
	default:
		t.Fatalf("run after the restart: %s %s %s", v.Run.Status, v.Run.Reason, v.Run.Detail)
	}
	a, err := auditRuns(ctx, log, sandbox, []string{run})
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	t.Logf("killed with %d events acknowledged (step %d observed); after the restart %d events: %s", len(before), killAfter, len(after), a)
}

// observed reports whether recs hold step n's observation.
func observed(recs []events.Record, n int) bool {
	v, err := fold(recs)
	if err != nil {
		return false
	}
	s := v.Step(n)
	return s != nil && s.Observation != nil
}

// joinEmbedded connects to the worker's embedded server at addr once it
// listens and has set up the streams, and returns the log, the queue and
// a driver with the workers' tool set, for creating runs and reading them.
func joinEmbedded(t *testing.T, ctx context.Context, p *proc, addr, sandbox string) (*events.Log, *fleet.Queue, *driver.Driver, *nats.Conn) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stderr.String(), "worker running") {
		if time.Now().After(deadline) {
			t.Fatalf("worker never said it runs:\n%s", p.tail(2000))
		}
		time.Sleep(10 * time.Millisecond)
	}
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	log, err := events.Attach(ctx, js, events.Config{})
	if err != nil {
		t.Fatal(err)
	}
	q, _, err := fleet.Attach(ctx, js, fleet.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tools, err := sandboxTools(sandbox, events.ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	d, err := driver.New(driver.Config{Log: log, Policy: allowAll(), Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	return log, q, d, nc
}

func freeLocalAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
