// Package toolbox holds the built-in tools a worker can be configured with:
// small, real tools over a sandbox directory (read, write, delete a file;
// "send" a message to an outbox; finish a run) that the demo, the worker
// binary and the fault tests use. Every execution is appended to a ledger
// file in the sandbox, so a test in another process can count them.
//
// It must not decide anything: side-effect classes are declared here and
// judged by the policy.
package toolbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
)

// ledgerFile is the file in the sandbox every execution is appended to, one
// line each: "<run> <step> <tool> <args>".
const ledgerFile = "ledger.log"

type builtin struct {
	spec driver.Spec
	dir  string
	exec func(ctx context.Context, dir string, args map[string]any) (string, error)
}

func (b *builtin) Spec() driver.Spec { return b.spec }

func (b *builtin) Execute(ctx context.Context, raw json.RawMessage) (string, error) {
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil {
		return "", fmt.Errorf("%s: arguments: %w", b.spec.Name, err)
	}
	call, _ := driver.CallOf(ctx)
	if err := appendLedger(b.dir, call, b.spec.Name, raw); err != nil {
		return "", err
	}
	return b.exec(ctx, b.dir, args)
}

func appendLedger(dir string, call driver.Call, tool string, raw []byte) error {
	f, err := os.OpenFile(filepath.Join(dir, ledgerFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer f.Close()
	if _, err := fmt.Fprintf(f, "%s %d %s %s\n", call.Run, call.Step, tool, raw); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	return f.Sync()
}

const pathSchema = `{"type":"object","properties":{"path":{"type":"string","pattern":"^[A-Za-z0-9_.-]+$"}},"required":["path"],"additionalProperties":false}`

var specs = map[string]driver.Spec{
	"read_file":   {Description: "read a file of the sandbox", Schema: json.RawMessage(pathSchema), SideEffect: events.ReadOnly},
	"write_file":  {Description: "write a file of the sandbox", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","pattern":"^[A-Za-z0-9_.-]+$"},"content":{"type":"string"}},"required":["path","content"],"additionalProperties":false}`), SideEffect: events.LocalMutation},
	"delete_file": {Description: "delete a file of the sandbox", Schema: json.RawMessage(pathSchema), SideEffect: events.Destructive},
	"send_email":  {Description: "send a message (to the sandbox outbox)", Schema: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string","format":"email"},"body":{"type":"string"}},"required":["to","body"],"additionalProperties":false}`), SideEffect: events.RemoteMutation},
	"sleep":       {Description: "wait some milliseconds", Schema: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":600000}},"required":["ms"]}`), SideEffect: events.ReadOnly},
	"finish":      {Description: "end the run with a summary", Schema: json.RawMessage(`{"type":"object","properties":{"summary":{"type":"string"}},"required":["summary"]}`), SideEffect: events.ReadOnly, Terminal: true},
}

var execs = map[string]func(ctx context.Context, dir string, a map[string]any) (string, error){
	"read_file": func(_ context.Context, dir string, a map[string]any) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, a["path"].(string)))
		return string(b), err
	},
	"write_file": func(_ context.Context, dir string, a map[string]any) (string, error) {
		return fmt.Sprintf("wrote %s", a["path"]), os.WriteFile(filepath.Join(dir, a["path"].(string)), []byte(a["content"].(string)), 0o644)
	},
	"delete_file": func(_ context.Context, dir string, a map[string]any) (string, error) {
		return fmt.Sprintf("deleted %s", a["path"]), os.Remove(filepath.Join(dir, a["path"].(string)))
	},
	"send_email": func(_ context.Context, dir string, a map[string]any) (string, error) {
		f, err := os.OpenFile(filepath.Join(dir, "outbox.txt"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return "", err
		}
		defer f.Close()
		_, err = fmt.Fprintf(f, "to %s: %s\n", a["to"], a["body"])
		return fmt.Sprintf("sent to %s", a["to"]), err
	},
	"sleep": func(ctx context.Context, _ string, a map[string]any) (string, error) {
		d := time.Duration(a["ms"].(float64)) * time.Millisecond
		select {
		case <-time.After(d):
			return fmt.Sprintf("slept %s", d), nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	},
	"finish": func(_ context.Context, _ string, a map[string]any) (string, error) {
		return a["summary"].(string), nil
	},
}

// Names lists the built-in tools.
func Names() []string {
	out := make([]string, 0, len(specs))
	for n := range specs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ErrUnknown marks a tool name that is not built in.
var ErrUnknown = errors.New("no built-in tool")

// New returns the built-in tool name working in the sandbox dir, with the
// given timeout (zero: 10s) and, when class is not empty, that side-effect
// class instead of its own.
func New(name, dir string, class events.SideEffect, timeout time.Duration) (driver.Tool, error) {
	s, ok := specs[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (have %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	s.Name = name
	s.Timeout = timeout
	if s.Timeout == 0 {
		s.Timeout = 10 * time.Second
	}
	if class != "" {
		s.SideEffect = class
	}
	return &builtin{spec: s, dir: dir, exec: execs[name]}, nil
}

// Ledger reads the sandbox's ledger: one entry per execution, "<run> <step> <tool> <args>".
// Only lines that end in a newline count: the file is created before its
// first line is written, and a reader racing a tool may see it empty or a
// line not yet whole. That fragment is an execution still being recorded,
// not an entry, and a later read sees it complete.
func Ledger(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, ledgerFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	whole := string(b)
	if i := strings.LastIndexByte(whole, '\n'); i >= 0 {
		whole = whole[:i]
	} else {
		return nil, nil
	}
	return strings.Split(whole, "\n"), nil
}
