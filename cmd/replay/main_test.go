package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

var update = flag.Bool("update", false, "rewrite the golden outputs in testdata")

// The recorded runs are the replay package's fixtures (made by driving real
// runs; see replay/record_test.go).
func fixture(t *testing.T, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "replay", "testdata", "runs", name))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

// publish stores lines, exact event bytes, in order on their subjects. Line
// i goes on the subject of orig[i] (its untampered original).
func publish(t *testing.T, js jetstream.JetStream, orig, lines [][]byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	log, err := events.Open(ctx, js, events.Config{})
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	for i, line := range lines {
		e, err := events.Decode(orig[i])
		if err != nil {
			t.Fatalf("fixture line %d: %v", i+1, err)
		}
		if _, err := js.Publish(ctx, log.Subject(e.Run, e.Kind), line, jetstream.WithMsgID(e.ID)); err != nil {
			t.Fatalf("publish line %d: %v", i+1, err)
		}
	}
}

// serve loads lines into an embedded JetStream listening on 127.0.0.1 and
// returns its URL.
func serve(t *testing.T, orig, lines [][]byte) string {
	t.Helper()
	env := testkit.JetStream(t)
	publish(t, env.JS, orig, lines)
	return env.Server.ClientURL()
}

// operator returns the public key of the operator who signed the fixtures.
func operator(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.FromRawSeed(nkeys.PrefixByteUser, bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

// replayCmd runs the command and returns its exit status and output.
func replayCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestRun_ExitStatus(t *testing.T) {
	fleet, grants := fixture(t, "fleet.jsonl"), fixture(t, "grants.jsonl")
	fleetURL, grantsURL := serve(t, fleet, fleet), serve(t, grants, grants)
	// The fleet with one recorded reason altered.
	tampered := make([][]byte, len(fleet))
	copy(tampered, fleet)
	for i, l := range tampered {
		if bytes.Contains(l, []byte(`"reason":"local_mutation tool write_file"`)) {
			tampered[i] = bytes.Replace(l, []byte(`local_mutation tool write_file`), []byte(`approved by the board`), 1)
			break
		}
	}
	tamperedURL := serve(t, fleet, tampered)
	op := operator(t)
	tests := []struct {
		name   string
		args   []string
		want   int
		golden string
	}{
		{"same policy", []string{"--nats", fleetURL, "--policy-id", "side-effects v1", "--operator", op, "--all"}, exitSame, "same.golden"},
		{"remote mutation allowed widens", []string{"--nats", fleetURL, "--side-effects", "remote_mutation=allow", "--baseline", "side-effects v1", "--operator", op}, exitDifferent, "widen.golden"},
		{"read only needing approval narrows", []string{"--nats", fleetURL, "--side-effects", "read_only=require_approval", "--baseline", "side-effects v1", "--operator", op}, exitDifferent, "narrow.golden"},
		{"another policy id is not checkable", []string{"--nats", fleetURL, "--operator", op}, exitSame, "other_policy.golden"},
		{"forged grant", []string{"--nats", grantsURL, "--policy-id", "side-effects v1", "--operator", op}, exitDifferent, "grants.golden"},
		{"tampered event", []string{"--nats", tamperedURL, "--policy-id", "side-effects v1", "--operator", op}, exitDifferent, "tampered.golden"},
		{"one run, one tool", []string{"--nats", fleetURL, "--policy-id", "side-effects v1", "--run", "alpha", "--tool", "send_email", "--all"}, exitSame, "selection.golden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := replayCmd(t, tt.args...)
			if code != tt.want {
				t.Errorf("exit status: got %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.want, out, errOut)
			}
			golden(t, tt.golden, out)
		})
	}
}

func TestRun_JSONLines(t *testing.T) {
	fleet := fixture(t, "fleet.jsonl")
	url := serve(t, fleet, fleet)
	code, out, _ := replayCmd(t, "--nats", url, "--json", "--side-effects", "remote_mutation=allow", "--baseline", "side-effects v1")
	if code != exitDifferent {
		t.Errorf("exit status: got %d, want %d", code, exitDifferent)
	}
	types := map[string]int{}
	var last map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		types[m["type"].(string)]++
		last = m
	}
	if types["evaluation"] != 10 || types["decision"] != 2 || types["summary"] != 1 {
		t.Errorf("lines by type: got %v, want 10 evaluations, 2 decisions, 1 summary", types)
	}
	if last["type"] != "summary" || last["exit"] != float64(exitDifferent) || last["widens"] != float64(2) {
		t.Errorf("last line: got %v, want the summary with exit 1 and 2 widens", last)
	}
}

func TestRun_ReadsADataDirectory(t *testing.T) {
	data := t.TempDir()
	srv, err := embedded.Start(embedded.Config{Dir: filepath.Join(data, "jetstream")})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	fleet := fixture(t, "fleet.jsonl")
	publish(t, js, fleet, fleet)
	nc.Close()
	srv.Stop()

	code, out, errOut := replayCmd(t, "--data", data, "--policy-id", "side-effects v1")
	if code != exitSame {
		t.Fatalf("exit status: got %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitSame, out, errOut)
	}
	if !strings.Contains(out, "10 evaluations: 10 same") {
		t.Errorf("summary: got\n%s\nwant 10 evaluations, all the same", out)
	}
}

func TestRun_ErrorsExitTwo(t *testing.T) {
	fleet := fixture(t, "fleet.jsonl")
	url := serve(t, fleet, fleet)
	tests := []struct {
		name string
		args []string
	}{
		{"unknown flag", []string{"--nope"}},
		{"unknown class", []string{"--nats", url, "--side-effects", "remote=allow"}},
		{"unknown outcome", []string{"--nats", url, "--side-effects", "read_only=maybe"}},
		{"bad time", []string{"--nats", url, "--since", "yesterday"}},
		{"bad operator key", []string{"--nats", url, "--operator", "SUAXYZ"}},
		{"bad run id", []string{"--nats", url, "--run", "a.b"}},
		{"unknown run", []string{"--nats", url, "--run", "zulu"}},
		{"no data directory", []string{"--data", filepath.Join(t.TempDir(), "none")}},
		{"nothing listening", []string{"--nats", "nats://127.0.0.1:1"}},
		{"no runs stream", []string{"--nats", url, "--stream", "OTHER"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := replayCmd(t, tt.args...)
			if code != exitError {
				t.Errorf("exit status: got %d, want %d (stderr: %s)", code, exitError, errOut)
			}
			if !strings.HasPrefix(errOut, "replay: ") || strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr: got %q, want the error on one line", errOut)
			}
		})
	}
}

func TestRun_HelpExitsZero(t *testing.T) {
	code, out, _ := replayCmd(t, "--help")
	if code != exitSame || !strings.Contains(out, "what-if") || !strings.Contains(out, "-side-effects") {
		t.Errorf("got exit %d and %q, want 0 and the usage with the flags", code, out)
	}
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) { testkit.Golden(t, name, got, *update) }
