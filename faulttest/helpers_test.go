// Package faulttest holds the fleet's fault tests: real worker processes
// (the cmd/worker binary) killed with SIGKILL at every append point of a
// step, a worker stalled with SIGSTOP past its AckWait and woken after its
// run was taken over, and a 3-node JetStream cluster losing the leader of the
// runs stream while runs are in flight. It holds tests only.
//
// The JetStream server of the process tests runs in the test process, and
// every worker joins it with --nats: killing a worker never takes the log
// with it.
package faulttest

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/arbiter-run/arbiter/toolbox"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	crashRounds   = flag.Int("crash.rounds", 0, "rounds of each crash scenario (default 20, or $ARBITER_CRASH_ROUNDS)")
	crashParallel = flag.Int("crash.parallel", 10, "crash rounds run at once, each with its own server and workers")
)

// binDir holds the worker binaries, each built once per test binary.
var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "arbiter-faulttest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// faultsTag is the build tag that compiles fault injection into the worker
// (cmd/worker/fault.go: ARBITER_CRASH_BEFORE). The shipped build has none.
const faultsTag = "arbiter_faults"

// workerBinary builds cmd/worker with fault injection the first time a test
// asks for it: the crash tests' worker. Without ARBITER_CRASH_BEFORE it
// works as the shipped one.
func workerBinary(t *testing.T) string { return buildWorker(t, faultsTag) }

// shippedWorkerBinary builds cmd/worker as it ships, with no build tags.
func shippedWorkerBinary(t *testing.T) string { return buildWorker(t, "") }

// workerBuild is one build of cmd/worker, made once per test binary.
type workerBuild struct {
	once sync.Once
	path string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*workerBuild{} // by build tags
)

func buildWorker(t *testing.T, tags string) string {
	t.Helper()
	buildsMu.Lock()
	b := builds[tags]
	if b == nil {
		b = &workerBuild{}
		builds[tags] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			b.err = fmt.Errorf("find the go command: %w", err)
			return
		}
		out := filepath.Join(binDir, "worker")
		if tags != "" {
			out += "-" + tags
		}
		cmd := exec.Command(goTool, "build", "-tags", tags, "-o", out, "github.com/arbiter-run/arbiter/cmd/worker")
		if o, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build cmd/worker (tags %q): %v\n%s", tags, err, o)
			return
		}
		b.path = out
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// rounds is how many times each crash scenario is repeated.
func rounds() int {
	if *crashRounds > 0 {
		return *crashRounds
	}
	if s := os.Getenv("ARBITER_CRASH_ROUNDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return 20
}

// The tools every worker of a process test is configured with, in this
// order (the order is part of the recorded tool set). send_email keeps its
// remote_mutation class explicitly; the sleep tool's class is the test's.
func toolsYAML(sleepClass events.SideEffect) string {
	return fmt.Sprintf(`tools:
  - name: write_file
  - name: read_file
  - name: send_email
    class: remote_mutation
  - name: sleep
    class: %s
  - name: finish
`, sleepClass)
}

func sandboxTools(sandbox string, sleepClass events.SideEffect) ([]driver.Tool, error) {
	var out []driver.Tool
	for _, tc := range []struct {
		name  string
		class events.SideEffect
	}{
		{"write_file", ""}, {"read_file", ""}, {"send_email", events.RemoteMutation}, {"sleep", sleepClass}, {"finish", ""},
	} {
		tool, err := toolbox.New(tc.name, sandbox, tc.class, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, tool)
	}
	return out, nil
}

// allowAll is the policy of the process tests: every class runs without an
// operator, so what a test sees is the crash and nothing else.
const allowAllID = "faulttest-allow-all"

func allowAll() policy.Policy {
	return policy.WithID(policy.SideEffectPolicy{
		events.ReadOnly: events.Allow, events.LocalMutation: events.Allow,
		events.RemoteMutation: events.Allow, events.Destructive: events.Allow,
	}, allowAllID)
}

const configTail = `policy:
  id: ` + allowAllID + `
  side_effects:
    read_only: allow
    local_mutation: allow
    remote_mutation: allow
    destructive: allow
agents:
  # steps: one call of each class, then the terminal tool.
  steps:
    - {tool: write_file, args: '{"path":"out.txt","content":"hello"}'}
    - {tool: read_file, args: '{"path":"notes.txt"}'}
    - {tool: send_email, args: '{"to":"ops@example.com","body":"the deploy is done"}'}
    - {tool: finish, args: '{"summary":"done"}'}
  # slow: the same with short sleeps between, so a kill at a random time
  # finds runs mid-step.
  slow:
    - {tool: write_file, args: '{"path":"out.txt","content":"hello"}'}
    - {tool: sleep, args: '{"ms":15}'}
    - {tool: send_email, args: '{"to":"ops@example.com","body":"the deploy is done"}'}
    - {tool: sleep, args: '{"ms":15}'}
    - {tool: finish, args: '{"summary":"done"}'}
  # stall: a long call, a write, the end.
  stall:
    - {tool: sleep, args: '{"ms":2500}'}
    - {tool: write_file, args: '{"path":"after.txt","content":"after the stall"}'}
    - {tool: finish, args: '{"summary":"done"}'}
`

// procEnv is one JetStream server in the test process, the client the test
// reads through, a shared sandbox, and the config file every worker reads.
type procEnv struct {
	dir     string
	srv     *embedded.Server
	url     string
	nc      *nats.Conn
	log     *events.Log
	q       *fleet.Queue
	d       *driver.Driver // creates runs, with the workers' tool set
	sandbox string
	config  string
}

// newProcEnv sets up a server storing in dir and everything the workers
// share. close stops the server.
func newProcEnv(ctx context.Context, dir string, sleepClass events.SideEffect) (*procEnv, error) {
	return newProcEnvSync(ctx, dir, sleepClass, false)
}

// newProcEnvSync is newProcEnv with the server's SyncAlways set: every
// append fsynced before it is acknowledged.
func newProcEnvSync(ctx context.Context, dir string, sleepClass events.SideEffect, syncAlways bool) (*procEnv, error) {
	srv, err := embedded.Start(embedded.Config{Dir: filepath.Join(dir, "jetstream"), Port: -1, SyncAlways: syncAlways})
	if err != nil {
		return nil, err
	}
	e := &procEnv{dir: dir, srv: srv, url: srv.ClientURL(), sandbox: filepath.Join(dir, "sandbox"), config: filepath.Join(dir, "worker.yaml")}
	if err := e.setup(ctx, sleepClass); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *procEnv) setup(ctx context.Context, sleepClass events.SideEffect) error {
	var err error
	if e.nc, err = e.srv.Connect(); err != nil {
		return err
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		return err
	}
	if e.log, err = events.Open(ctx, js, events.Config{}); err != nil {
		return err
	}
	if e.q, _, err = fleet.Setup(ctx, js, fleet.Config{AckWait: time.Second}); err != nil {
		return err
	}
	if err := os.MkdirAll(e.sandbox, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.sandbox, "notes.txt"), []byte("remember the deploy\n"), 0o644); err != nil {
		return err
	}
	cfg := "sandbox: " + strconv.Quote(e.sandbox) + "\n" + toolsYAML(sleepClass) + configTail
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		return err
	}
	tools, err := sandboxTools(e.sandbox, sleepClass)
	if err != nil {
		return err
	}
	e.d, err = driver.New(driver.Config{Log: e.log, Policy: allowAll(), Tools: tools})
	return err
}

func (e *procEnv) close() {
	if e.nc != nil {
		e.nc.Close()
	}
	e.srv.Stop()
}

// workerOpts start one worker process.
type workerOpts struct {
	crashBefore string   // ARBITER_CRASH_BEFORE, "" for none
	concurrency int      // --concurrency; 0 keeps the default
	metrics     bool     // serve metrics on a free port
	args        []string // more flags
}

// proc is a running worker process.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	err    error // Wait's error, set before done is closed
}

func (e *procEnv) startWorker(bin string, o workerOpts) (*proc, error) {
	args := []string{"--nats", e.url, "--config", e.config, "--ack-wait", "1s", "--data", filepath.Join(e.dir, "data")}
	if o.metrics {
		args = append(args, "--metrics", "127.0.0.1:0")
	} else {
		args = append(args, "--metrics", "")
	}
	if o.concurrency > 0 {
		args = append(args, "--concurrency", strconv.Itoa(o.concurrency))
	}
	cmd := exec.Command(bin, append(args, o.args...)...)
	cmd.Dir = e.dir
	cmd.Env = []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ARBITER_CRASH_BEFORE=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if o.crashBefore != "" {
		cmd.Env = append(cmd.Env, "ARBITER_CRASH_BEFORE="+o.crashBefore)
	}
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// wait waits at most d for the process to exit and returns Wait's error;
// errStillRunning if it did not exit in time.
func (p *proc) wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		return errStillRunning
	}
}

var errStillRunning = errors.New("worker still running")

// stop kills the process if it still runs and reaps it: the cleanup of
// every process a test starts.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// killedBy reports whether err (from wait) says the process died of sig.
func killedBy(err error, sig syscall.Signal) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// tail returns the last n bytes of the process's stderr, for failure
// messages.
func (p *proc) tail(n int) string {
	s := p.stderr.String()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

var metricsAddr = regexp.MustCompile(`msg="metrics and health" addr=(\S+)`)

// metrics scrapes the worker's /metrics once and returns every sample
// without labels by name.
func (p *proc) metrics(ctx context.Context) (map[string]float64, error) {
	m := metricsAddr.FindStringSubmatch(p.stderr.String())
	if m == nil {
		return nil, errors.New("worker has not logged its metrics address")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m[1]+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err == nil {
			out[name] = f
		}
	}
	return out, sc.Err()
}

// syncBuffer is testkit.SyncBuffer.
type syncBuffer = testkit.SyncBuffer

// ledgerEntry is one execution the sandbox's ledger recorded.
type ledgerEntry struct {
	Run  string
	Step int
	Tool string
	Args string
}

func readLedger(sandbox string) ([]ledgerEntry, error) {
	lines, err := toolbox.Ledger(sandbox)
	if err != nil {
		return nil, err
	}
	out := make([]ledgerEntry, 0, len(lines))
	for _, l := range lines {
		f := strings.SplitN(l, " ", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("ledger line %q: want \"<run> <step> <tool> <args>\"", l)
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, fmt.Errorf("ledger line %q: step: %w", l, err)
		}
		out = append(out, ledgerEntry{Run: f[0], Step: n, Tool: f[2], Args: f[3]})
	}
	return out, nil
}

// settled reports whether a run needs nobody any more: it ended, or it
// waits on an operator.
func settled(v projector.View) bool {
	return v.Run.Status.Ended() || v.Run.Status == projector.Waiting
}

// waitSettled polls until every run is settled, or d passes.
func waitSettled(ctx context.Context, d *driver.Driver, runs []string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		left := ""
		for _, id := range runs {
			r, err := d.Load(ctx, id)
			if err != nil {
				left = fmt.Sprintf("%s (%v)", id, err)
				break
			}
			if !settled(r.View()) {
				left = fmt.Sprintf("%s (%s after %d events)", id, r.View().Run.Status, r.View().Run.Events)
				break
			}
		}
		if left == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s not settled after %s", left, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// trace renders a run's events for a failure message.
func trace(ctx context.Context, l *events.Log, run string) string {
	recs, _, err := l.Read(ctx, run)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", run, err)
	}
	var b strings.Builder
	for _, r := range recs {
		body := string(r.Event.Body)
		if len(body) > 160 {
			body = body[:160] + "…"
		}
		fmt.Fprintf(&b, "\n  %d %s %s", r.Event.Seq, r.Event.Kind, body)
	}
	return b.String()
}
