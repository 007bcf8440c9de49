package opstest

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestWorker_NatsServerDownExitsSaying: a worker told to join a server
// that is not there exits 1 at once (no retrying for ever), naming the
// address and what to check.
func TestWorker_NatsServerDownExitsSaying(t *testing.T) {
	addr := freeAddr(t) // nothing listens there
	code, _, stderr := run(t, t.TempDir(), nil, binary(t, "worker"), "--nats", "nats://"+addr, "--user", "worker", "--password", "x", "--metrics", "")
	if code != 1 || !strings.Contains(stderr, "cannot reach NATS at nats://"+addr) || !strings.Contains(stderr, "is the server up") {
		t.Errorf("exit %d, stderr %q; want 1 and a message naming the address", code, stderr)
	}
}

// TestStart_ExistingRunAndARetriedStart: `arbiter start --id` of a run
// that exists with other input says "run <id> already exists" (exit 1);
// the same start again only nudges it again (exit 0). The worker listens
// on a port that is not 4222: the command finds it through --data.
func TestStart_ExistingRunAndARetriedStart(t *testing.T) {
	dir := t.TempDir()
	embeddedWorker(t, dir)
	arbiter := binary(t, "arbiter")
	data := filepath.Join(dir, "arbiter-data")
	code, out, stderr := run(t, dir, nil, arbiter, "start", "--agent", "demo", "--id", "r1", "--data", data)
	if code != 0 || !strings.Contains(out, "started run r1 (agent demo; limits: 100 steps, 5 failures in a row, 5 repeats, no time limit)") {
		t.Fatalf("first start: exit %d, %q, %q", code, out, stderr)
	}
	code, out, stderr = run(t, dir, nil, arbiter, "start", "--agent", "demo", "--id", "r1", "--data", data)
	if code != 0 || !strings.Contains(out, "run r1 was already recorded as asked; nudged the fleet again") {
		t.Errorf("the same start again: exit %d, %q, %q; want 0 and a re-nudge", code, out, stderr)
	}
	code, _, stderr = run(t, dir, nil, arbiter, "start", "--agent", "demo", "--id", "r1", "--input", "other", "--data", data)
	if code != 1 || !strings.Contains(stderr, "run r1 already exists") || strings.Contains(stderr, "fenced") {
		t.Errorf("another start on r1: exit %d, stderr %q; want 1 and \"run r1 already exists\"", code, stderr)
	}
	code, out, _ = run(t, dir, nil, arbiter, "start", "--agent", "demo", "--id", "r2", "--max-steps", "-1", "--data", data)
	if code != 0 || !strings.Contains(out, "limits: no step limit, 5 failures in a row") {
		t.Errorf("start --max-steps -1: exit %d, %q; want no step limit said", code, out)
	}
	code, _, stderr = run(t, dir, nil, arbiter, "start", "--agent", "demo", "--id", "r3", "--max-steps", "-2", "--data", data)
	if code != 1 || !strings.Contains(stderr, "max_steps -2") {
		t.Errorf("start --max-steps -2: exit %d, %q; want the limit refused by name", code, stderr)
	}
	code, out, _ = run(t, dir, nil, arbiter, "show", "r2", "--data", data)
	if code != 0 || !strings.Contains(out, "limits: no step limit, 5 failures in a row, 5 repeats, no time limit") {
		t.Errorf("show r2: exit %d, %q; want its limits shown", code, out)
	}
}

// TestReplay_DataReadsThroughTheWorkerOnItsPort: replay --data reads
// through the worker that holds the store, on the port it was given (not
// 4222), instead of blaming the store's lock; a worker that listens
// nowhere is named as the reason.
func TestReplay_DataReadsThroughTheWorkerOnItsPort(t *testing.T) {
	dir := t.TempDir()
	embeddedWorker(t, dir)
	data := filepath.Join(dir, "arbiter-data")
	if code, out, stderr := run(t, dir, nil, binary(t, "arbiter"), "start", "--agent", "demo", "--data", data); code != 0 {
		t.Fatalf("start: %d %q %q", code, out, stderr)
	}
	code, out, stderr := run(t, dir, nil, binary(t, "replay"), "--data", data)
	if code == 2 || strings.Contains(stderr, "in use") {
		t.Errorf("replay --data of a running worker on another port: exit %d, stderr %q, out %q", code, stderr, out)
	}

	quiet := t.TempDir()
	w := start(t, quiet, nil, binary(t, "worker"), "--data", filepath.Join(quiet, "arbiter-data"), "--listen", "", "--metrics", "")
	w.waitFor(t, "worker running")
	code, _, stderr = run(t, quiet, nil, binary(t, "replay"), "--data", filepath.Join(quiet, "arbiter-data"))
	if code != 2 || !strings.Contains(stderr, "says no address it listens on") || !strings.Contains(stderr, "--nats") {
		t.Errorf("replay --data of a worker with no listener: exit %d, stderr %q; want 2 and the reason", code, stderr)
	}
}

var metricsAddr = regexp.MustCompile(`msg="metrics and health" addr=(\S+)`)

// TestWorker_TwoOnOneMachine: a second worker, joining with --nats and
// its password from $ARBITER_NATS_PASSWORD, does not clash with the first
// on the default metrics port: it serves on another, logged; both answer
// /healthz. A metrics address given and taken is a clear error.
func TestWorker_TwoOnOneMachine(t *testing.T) {
	dir := t.TempDir()
	a, url := embeddedWorker(t, dir)
	pw, err := os.ReadFile(filepath.Join(dir, "arbiter-data", "credentials", "worker.password"))
	if err != nil {
		t.Fatal(err)
	}
	aAddr := metricsAddr.FindStringSubmatch(a.stderr())
	if aAddr == nil {
		t.Fatalf("the first worker logged no metrics address:\n%s", a.stderr())
	}
	env := []string{"ARBITER_NATS_PASSWORD=" + strings.TrimSpace(string(pw))}
	b := start(t, dir, env, binary(t, "worker"), "--nats", url, "--user", "worker", "--data", filepath.Join(dir, "b-data"))
	bLine := b.waitFor(t, "metrics and health")
	b.waitFor(t, "worker running")
	bAddr := metricsAddr.FindStringSubmatch(bLine)
	if bAddr == nil || bAddr[1] == aAddr[1] {
		t.Fatalf("second worker's metrics at %v, the first's at %s: want another address", bAddr, aAddr[1])
	}
	for _, addr := range []string{aAddr[1], bAddr[1]} {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/healthz at %s: %s", addr, resp.Status)
		}
	}
	pwFile := filepath.Join(dir, "arbiter-data", "credentials", "worker.password")
	code, _, stderr := run(t, dir, nil, binary(t, "worker"), "--nats", url, "--user", "worker", "--password-file", pwFile, "--data", filepath.Join(dir, "c-data"), "--metrics", aAddr[1])
	if code != 1 || !strings.Contains(stderr, "--metrics "+aAddr[1]+": the address is in use") {
		t.Errorf("a third worker asking for the first's metrics address: exit %d, stderr %q; want 1 and a clear error", code, stderr)
	}
}
