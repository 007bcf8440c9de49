package opstest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "arbiter-opstest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildMu sync.Mutex
	built   = map[string]error{}
)

// binary builds cmd/<name> the first time a test asks for it.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	out := filepath.Join(binDir, name)
	err, done := built[name]
	if !done {
		b, berr := exec.Command("go", "build", "-o", out, "github.com/arbiter-run/arbiter/cmd/"+name).CombinedOutput()
		if berr != nil {
			err = fmt.Errorf("build cmd/%s: %v\n%s", name, berr, b)
		}
		built[name] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// proc is a running binary whose stderr is kept.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	errb bytes.Buffer
	line chan string
	done chan error
}

// start runs bin with args (in dir, with env added) until the test ends.
func start(t *testing.T, dir string, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), line: make(chan string, 256), done: make(chan error, 1)}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.errb.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.line <- sc.Text():
			default:
			}
		}
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			t.Errorf("%s did not stop within 20s of SIGINT", filepath.Base(bin))
		}
	})
	return p
}

// waitFor waits (at most 30s) for a stderr line holding want, and returns it.
func (p *proc) waitFor(t *testing.T, want string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l := <-p.line:
			if strings.Contains(l, want) {
				return l
			}
		case err := <-p.done:
			p.done <- err
			t.Fatalf("exited (%v) before saying %q; stderr:\n%s", err, want, p.stderr())
		case <-deadline:
			t.Fatalf("no %q within 30s; stderr:\n%s", want, p.stderr())
		}
	}
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errb.String()
}

// run runs bin with args to its end (at most 60s) and returns its exit
// code, stdout and stderr.
func run(t *testing.T, dir string, env []string, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not end within 60s", filepath.Base(bin), args)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// embeddedWorker starts a worker hosting its embedded JetStream in dir's
// arbiter-data, listening on a free port (not 4222), and waits until it
// runs. It returns the worker and its NATS URL.
func embeddedWorker(t *testing.T, dir string, extra ...string) (*proc, string) {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"--data", filepath.Join(dir, "arbiter-data"), "--listen", addr}, extra...)
	w := start(t, dir, nil, binary(t, "worker"), args...)
	w.waitFor(t, "worker running")
	return w, "nats://" + addr
}
