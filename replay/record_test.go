package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// The recorded runs in testdata/runs are made here, by driving real runs
// with the driver on an embedded JetStream and writing every stored message
// of the stream, in order, one per line. `go test ./replay -update` makes
// them again (with new event ids) and rewrites the golden reports.

// Baseline is the id of the policy that recorded the fleet.
const baselineID = "side-effects v1"

// Schemas of the recorded tools.
const (
	pathSchema  = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`
	writeSchema = `{"type":"object","properties":{"path":{"type":"string"},"text":{"type":"string"}},"required":["path","text"]}`
	toSchema    = `{"type":"object","properties":{"to":{"type":"string"},"body":{"type":"string"}},"required":["to"]}`
)

// tools returns fresh ledgers of the recorded tool set.
func tools() []driver.Tool {
	return []driver.Tool{
		testkit.NewLedger("read_file", events.ReadOnly, pathSchema),
		testkit.NewLedger("write_file", events.LocalMutation, writeSchema),
		testkit.NewLedger("send_email", events.RemoteMutation, toSchema),
		testkit.NewLedger("delete_file", events.Destructive, pathSchema),
		testkit.NewLedger("finish", events.ReadOnly, testkit.AnyObject).Terminal(),
	}
}

// operatorKey returns the fixed key pair of test operator n, so recorded
// signatures verify in every later test run.
func operatorKey(t testing.TB, n byte) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.FromRawSeed(nkeys.PrefixByteUser, bytes.Repeat([]byte{n}, 32))
	if err != nil {
		t.Fatalf("operator key: %v", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatalf("operator key: %v", err)
	}
	return kp, pub
}

// clock is a deterministic clock: each reading is a second after the last.
type clock struct{ t time.Time }

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time { c.t = c.t.Add(time.Second); return c.t }

// recorder drives runs on a fresh embedded JetStream.
type recorder struct {
	t      *testing.T
	log    *events.Log
	clock  *clock
	intake uint64 // the last decisions-stream sequence a decision was recorded with
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	env := testkit.JetStream(t)
	return &recorder{t: t, log: env.Log(t, events.Config{}), clock: newClock()}
}

func (r *recorder) driver(p policy.Policy, ops approvals.Operators) *driver.Driver {
	r.t.Helper()
	d, err := driver.New(driver.Config{Log: r.log, Policy: p, Tools: tools(), Operators: ops, Now: r.clock.Now})
	if err != nil {
		r.t.Fatalf("driver.New: %v", err)
	}
	return d
}

// drive creates run id on d (or loads it, if it exists) and drives it with
// calls, the n-th for step n.
func (r *recorder) drive(d *driver.Driver, id string, calls ...driver.Action) *driver.Run {
	r.t.Helper()
	ctx := r.t.Context()
	run, err := d.Load(ctx, id)
	if err != nil {
		if run, err = d.Create(ctx, id, "script", json.RawMessage(`{"goal":"`+id+`"}`)); err != nil {
			r.t.Fatalf("create run %s: %v", id, err)
		}
	}
	if err := d.Drive(ctx, run, testkit.NewScript(calls...)); err != nil {
		r.t.Fatalf("drive run %s: %v", id, err)
	}
	return run
}

// decide records an operator's decision on run's pending approval, signed
// with kp over hash (the approval's own when hash is ""), as a worker
// records one it took from the decisions stream: received when signed, at
// the next intake sequence. A worker checks a decision before it records it;
// recording one that does not verify (another key, another hash) is what a
// worker with another operator set, or a forger with a worker's NATS user,
// leaves in the log, which replay must report.
func (r *recorder) decide(d *driver.Driver, id, decision, hash string, kp nkeys.KeyPair) {
	r.t.Helper()
	ctx := r.t.Context()
	run, err := d.Load(ctx, id)
	if err != nil {
		r.t.Fatalf("load run %s: %v", id, err)
	}
	v := run.View()
	a := v.PendingApproval()
	if a == nil {
		r.t.Fatalf("run %s: no pending approval (status %s)", id, v.Run.Status)
	}
	if hash == "" {
		hash = a.Hash
	}
	at := r.clock.Now()
	b, err := approvals.Sign(kp, id, a.ID, hash, decision, "recorded in a test", at)
	if err != nil {
		r.t.Fatalf("sign: %v", err)
	}
	r.intake++
	b.Received, b.Intake = at, r.intake
	kind := events.ApprovalGranted
	if decision == events.DecisionDeny {
		kind = events.ApprovalDenied
	}
	r.append(id, kind, b)
}

// append appends one event to run id by hand, as an operator or a crashed
// worker leaves it.
func (r *recorder) append(id string, k events.Kind, body any) {
	r.t.Helper()
	ctx := r.t.Context()
	tail, err := r.log.Tail(ctx, id)
	if err != nil {
		r.t.Fatalf("tail of %s: %v", id, err)
	}
	ev, err := events.New(id, k, body)
	if err != nil {
		r.t.Fatalf("new %s event: %v", k, err)
	}
	ev.Time = r.clock.Now()
	if _, err := r.log.Append(ctx, tail, ev); err != nil {
		r.t.Fatalf("append %s to %s: %v", k, id, err)
	}
}

// lines returns every stored message of the stream, in order.
func (r *recorder) lines() [][]byte {
	r.t.Helper()
	var out [][]byte
	err := r.log.Scan(r.t.Context(), 0, 1, func(rec events.RawRecord) error {
		out = append(out, bytes.Clone(rec.Data))
		return nil
	})
	if err != nil {
		r.t.Fatalf("scan: %v", err)
	}
	return out
}

func call(tool, args string) driver.Action { return testkit.Call(tool, args) }

// recordFleet records three runs of the baseline policy, interleaved:
// alpha pauses on a send, bravo runs to the end (a denied delete on the
// way), charlie asks to send and is denied, then alpha is granted and
// finishes.
func recordFleet(t *testing.T) [][]byte {
	r := newRecorder(t)
	kp, pub := operatorKey(t, 1)
	d := r.driver(policy.WithID(policy.DefaultSideEffects(), baselineID), approvals.Operators{pub: "ops"})
	alpha := []driver.Action{
		call("read_file", `{"path": "notes.txt"}`),
		call("write_file", `{"path": "notes.txt", "text": "draft"}`),
		call("send_email", `{"to": "ops@example.com", "body": "notes attached"}`),
		call("read_file", `{"path": "reply.txt"}`),
		call("finish", `{"summary": "sent"}`),
	}
	r.drive(d, "alpha", alpha...)
	r.drive(d, "bravo",
		call("read_file", `{"path": "disk.txt"}`),
		call("delete_file", `{"path": "/"}`),
		call("finish", `{}`),
	)
	r.drive(d, "charlie",
		call("read_file", `{"path": `),
		call("send_email", `{"to": "all@example.com"}`),
	)
	r.decide(d, "charlie", events.DecisionDeny, "", kp)
	r.drive(d, "charlie")
	r.decide(d, "alpha", events.DecisionGrant, "", kp)
	r.drive(d, "alpha", alpha...)
	return r.lines()
}

// recordOtherPolicies records delta, decided by a policy with another id,
// and echo, by a policy with none.
func recordOtherPolicies(t *testing.T) [][]byte {
	r := newRecorder(t)
	rules := policy.SideEffectPolicy{events.ReadOnly: events.Allow, events.LocalMutation: events.Deny, events.RemoteMutation: events.Deny, events.Destructive: events.Abort}
	r.drive(r.driver(policy.WithID(rules, "rules v7"), nil), "delta",
		call("read_file", `{"path": "a"}`),
		call("write_file", `{"path": "a", "text": "b"}`),
		call("finish", `{}`),
	)
	r.drive(r.driver(policy.DefaultSideEffects(), nil), "echo",
		call("read_file", `{"path": "a"}`),
		call("finish", `{}`),
	)
	return r.lines()
}

// recordGrants records foxtrot, whose approval gets a grant signed by a key
// that is no operator, then one over another hash, then a valid one; golf,
// whose write was interrupted by a crash and paused by the runtime; and
// hotel, whose evaluation names a tool spec the run never recorded.
func recordGrants(t *testing.T) [][]byte {
	r := newRecorder(t)
	kp, pub := operatorKey(t, 1)
	stranger, _ := operatorKey(t, 2)
	p := policy.WithID(policy.DefaultSideEffects(), baselineID)
	d := r.driver(p, approvals.Operators{pub: "ops"})
	foxtrot := []driver.Action{
		call("send_email", `{"to": "ops@example.com"}`),
		call("finish", `{}`),
	}
	r.drive(d, "foxtrot", foxtrot...)
	r.decide(d, "foxtrot", events.DecisionGrant, "", stranger)
	r.drive(d, "foxtrot", foxtrot...)
	r.decide(d, "foxtrot", events.DecisionGrant, wrongHash, kp)
	r.drive(d, "foxtrot", foxtrot...)
	r.decide(d, "foxtrot", events.DecisionGrant, "", kp)
	r.drive(d, "foxtrot", foxtrot...)

	// golf: what a worker that died mid-call leaves (the baseline's allow
	// of a local write, never observed), then a worker's recovery, which
	// pauses the write on the runtime's own approval.
	spec := d.Tools()[1]
	args := canon(t, `{"path": "notes.txt", "text": "draft"}`)
	r.append("golf", events.RunCreated, events.RunCreatedBody{Tools: d.Tools(), Limits: driver.DefaultLimits, Agent: "script"})
	r.append("golf", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: spec.Name, Args: string(args)})
	r.append("golf", events.StepPolicy, events.PolicyBody{
		Step: 1, Outcome: events.Allow, Reason: "local_mutation tool write_file", PolicyID: baselineID, Args: args, ToolHash: spec.Hash,
	})
	r.drive(d, "golf")

	// hotel: an evaluation naming a spec the run never recorded.
	r.append("hotel", events.RunCreated, events.RunCreatedBody{Tools: d.Tools(), Agent: "script"})
	r.append("hotel", events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "read_file", Args: `{"path":"x"}`})
	r.append("hotel", events.StepPolicy, events.PolicyBody{
		Step: 1, Outcome: events.Allow, Reason: "read_only tool read_file", PolicyID: baselineID,
		Args: json.RawMessage(`{"path":"x"}`), ToolHash: unknownSpec,
	})
	r.append("hotel", events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "ok"})
	r.append("hotel", events.RunFinished, events.EndBody{Reason: events.ReasonCompleted})
	if v := view(t, r.log, "golf"); v.Run.Status != projector.Waiting {
		t.Fatalf("golf after recovery: status %s, want %s", v.Run.Status, projector.Waiting)
	}
	return r.lines()
}

// Hashes that name nothing recorded.
const (
	wrongHash   = "0000000000000000000000000000000000000000000000000000000000000000"
	unknownSpec = "deadbeef00000000000000000000000000000000000000000000000000000000"
)

// view folds run from log.
func view(t *testing.T, log *events.Log, run string) projector.View {
	t.Helper()
	recs, _, err := log.Read(t.Context(), run)
	if err != nil {
		t.Fatalf("read %s: %v", run, err)
	}
	var v projector.View
	for _, rec := range recs {
		if err := v.Apply(rec.Event); err != nil {
			t.Fatalf("fold %s: %v", run, err)
		}
	}
	return v
}

// recordings are the recorded fixtures, by file name.
var recordings = map[string]func(*testing.T) [][]byte{
	"fleet.jsonl":          recordFleet,
	"other_policies.jsonl": recordOtherPolicies,
	"grants.jsonl":         recordGrants,
}

var recorded = map[string][][]byte{}

// fixture returns the lines of testdata/runs/name, recording them first
// when -update is given (once per test binary).
func fixture(t *testing.T, name string) [][]byte {
	t.Helper()
	if lines, ok := recorded[name]; ok {
		return lines
	}
	path := filepath.Join("testdata", "runs", name)
	if *update {
		lines := recordings[name](t)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(bytes.Join(lines, []byte("\n")), '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		recorded[name] = lines
		return lines
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read fixture: %v (make it with go test ./replay -update)", err)
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	recorded[name] = lines
	return lines
}

// load publishes lines, the exact stored bytes of events, in order into a
// fresh log on a fresh embedded JetStream, each on the subject its event
// belongs on.
func load(t *testing.T, lines [][]byte) *events.Log {
	t.Helper()
	return loadAs(t, lines, lines)
}

// loadAs is load for lines altered from orig: line i is published on the
// subject of orig[i].
func loadAs(t *testing.T, orig, lines [][]byte) *events.Log {
	t.Helper()
	return loadInto(t, events.Config{}, orig, lines)
}

// loadInto is loadAs into a log configured by cfg.
func loadInto(t *testing.T, cfg events.Config, orig, lines [][]byte) *events.Log {
	t.Helper()
	env := testkit.JetStream(t)
	log := env.Log(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i, line := range lines {
		e, err := events.Decode(orig[i])
		if err != nil {
			t.Fatalf("fixture line %d: %v", i+1, err)
		}
		if _, err := env.JS.Publish(ctx, log.Subject(e.Run, e.Kind), line, jetstream.WithMsgID(e.ID)); err != nil {
			t.Fatalf("publish line %d: %v", i+1, err)
		}
	}
	return log
}

// canon returns s in PolicyJSON form.
func canon(t *testing.T, s string) json.RawMessage { return testkit.PolicyJSON(t, s) }
