package policy

import (
	"context"

	"github.com/arbiter-run/arbiter/events"
)

type recordedKey struct{}

// WithRecorded returns ctx carrying the result recorded for the request
// being re-checked: what a replay hands a policy, so that one whose answer
// rests on a reading outside the run (a fleet-wide counter) re-checks
// against the reading it recorded instead of reading again.
func WithRecorded(ctx context.Context, b events.PolicyBody) context.Context {
	return context.WithValue(ctx, recordedKey{}, b)
}

// Recorded returns the recorded result ctx carries, if any: there is one
// only when the evaluation is a replay's.
func Recorded(ctx context.Context) (events.PolicyBody, bool) {
	b, ok := ctx.Value(recordedKey{}).(events.PolicyBody)
	return b, ok
}
