package driver

import (
	"context"
	"time"
)

// Call identifies the step a tool executes for. The driver puts it in the
// context of every Execute and Reconcile, so a tool can key its own
// idempotency records on it.
type Call struct {
	Run  string
	Step int
}

type callKey struct{}

// CallOf returns the step ctx executes for, if any.
func CallOf(ctx context.Context) (Call, bool) {
	c, ok := ctx.Value(callKey{}).(Call)
	return c, ok
}

func withCall(ctx context.Context, run string, step int) context.Context {
	return &callCtx{Context: ctx, call: Call{Run: run, Step: step}}
}

// callCtx is a context carrying the Call it executes for: one allocation a
// call, where context.WithValue makes two (its context and the boxed Call).
type callCtx struct {
	context.Context
	call Call
}

func (c *callCtx) Value(key any) any {
	if _, ok := key.(callKey); ok {
		return c.call
	}
	return c.Context.Value(key)
}

type busyKey struct{}

// WithBusy returns a context under which the driver calls fn every interval
// while a tool executes: a worker uses it to tell its work queue that the run
// is still held (InProgress), so a long step is not handed to another worker.
func WithBusy(ctx context.Context, interval time.Duration, fn func()) context.Context {
	return context.WithValue(ctx, busyKey{}, busy{interval, fn})
}

type busy struct {
	every time.Duration
	fn    func()
}

func busyOf(ctx context.Context) (busy, bool) {
	b, ok := ctx.Value(busyKey{}).(busy)
	return b, ok && b.fn != nil && b.every > 0
}

func hasBusy(ctx context.Context) bool {
	_, ok := busyOf(ctx)
	return ok
}
