package faulttest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/nats-io/nats.go/jetstream"
)

// TestWorker_RollbackCopyNeverReexecutes replays, against a real worker
// process, the rollback the adversarial review made (issue 10, item 1): a
// copy of an earlier event of a finished run (its decision to send, with a
// new id and its original position) published without the fence after the
// run's tail. A reader that took the run's length from that last message
// folded the shorter history and sent again on every nudge. The worker
// now refuses the run as a broken chain, says so in its log, and the send
// stays at one execution. The log line is the proof that the worker looked
// at the run after the copy (the nudge was taken), not a sleep.
func TestWorker_RollbackCopyNeverReexecutes(t *testing.T) {
	bin := workerBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := newProcEnv(ctx, t.TempDir(), events.ReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.close)
	w := mustStart(t, env, bin, workerOpts{})
	const run = "rolled-back"
	if err := env.q.Start(ctx, env.d, run, "steps", nil); err != nil {
		t.Fatal(err)
	}
	if err := waitSettled(ctx, env.d, []string{run}, time.Minute); err != nil {
		t.Fatal(err)
	}
	sends := func() int {
		l, err := readLedger(env.sandbox)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range l {
			if e.Run == run && e.Tool == "send_email" {
				n++
			}
		}
		return n
	}
	if got := sends(); got != 1 {
		t.Fatalf("send_email before the copy: %d executions, want 1", got)
	}

	recs, _, err := env.log.Read(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	var decided *events.Event
	for _, r := range recs {
		if r.Event.Kind == events.StepDecided && strings.Contains(string(r.Event.Body), "send_email") {
			decided = &r.Event
		}
	}
	if decided == nil {
		t.Fatalf("no decision to send in %s", trace(ctx, env.log, run))
	}
	copied := *decided
	copied.ID = events.NewID()
	data, err := copied.Encode()
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(env.nc)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // each publish used to add one more execution
		if _, err := js.Publish(ctx, env.log.Subject(run, copied.Kind), data); err != nil {
			t.Fatal(err)
		}
		if err := env.q.Nudge(ctx, run, "after-copy-"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(w.stderr.String(), "run does not load") || !strings.Contains(w.stderr.String(), run) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never reported the broken run (send_email executions: %d); its log:\n%s", sends(), w.tail(20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := sends(); got != 1 {
		t.Errorf("send_email after the rollback copy: %d executions, want 1", got)
	}
	if _, err := env.d.Load(ctx, run); err == nil {
		t.Error("the run with a rollback copy loads")
	}
}
