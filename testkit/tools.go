package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
)

// Ledger is a tool that counts its executions and keeps their arguments, so
// a test can prove a call ran exactly as often as it should.
type Ledger struct {
	S driver.Spec
	// Result computes the result; nil returns "ok".
	Result func(ctx context.Context, args json.RawMessage) (string, error)

	mu    sync.Mutex
	calls []json.RawMessage
}

var _ driver.Tool = (*Ledger)(nil)

// AnyObject is a schema that accepts any JSON object.
const AnyObject = `{"type":"object"}`

// NewLedger returns a ledger tool of the given side-effect class with
// schema, a one-second timeout, returning "ok".
func NewLedger(name string, class events.SideEffect, schema string) *Ledger {
	return &Ledger{S: driver.Spec{Name: name, Description: name + " (ledger)", Schema: json.RawMessage(schema), SideEffect: class, Timeout: time.Second}}
}

// Spec returns the tool's spec.
func (l *Ledger) Spec() driver.Spec { return l.S }

// Execute records the call and returns Result's answer.
func (l *Ledger) Execute(ctx context.Context, args json.RawMessage) (string, error) {
	l.mu.Lock()
	l.calls = append(l.calls, append(json.RawMessage(nil), args...))
	l.mu.Unlock()
	if l.Result != nil {
		return l.Result(ctx, args)
	}
	return "ok", nil
}

// Count is how many times the tool executed.
func (l *Ledger) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// Calls returns the arguments of every execution, in order.
func (l *Ledger) Calls() []json.RawMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]json.RawMessage(nil), l.calls...)
}

// Terminal makes the ledger a terminal tool and returns it.
func (l *Ledger) Terminal() *Ledger { l.S.Terminal = true; return l }

// Reconciling wraps a tool with a reconcile hook that gives answer.
type Reconciling struct {
	*Ledger
	Answer  driver.Reconciliation
	Content string
}

var _ driver.Reconciler = (*Reconciling)(nil)

// Reconcile returns the fixed answer.
func (r *Reconciling) Reconcile(context.Context, json.RawMessage) (driver.Reconciliation, string, error) {
	return r.Answer, r.Content, nil
}

// Events renders a run's events one per line: "seq kind detail", for
// examples and golden files.
func Events(recs []events.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf("%d %s %s", r.Event.Seq, r.Event.Kind, r.Event.Body)
	}
	return out
}
