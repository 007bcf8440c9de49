package driver

import (
	"fmt"

	"github.com/arbiter-run/arbiter/events"
)

// NoLimit, in a field of the [events.Limits] a run is asked for with, says
// "no limit on this": the run records zero there, which the loop reads as
// unbounded. Zero in a field asked for means "the default" instead (see
// [ApplyLimits]); every other negative value is refused.
const NoLimit = -1

// DefaultLimits are the limits a run gets when the limits it was asked for
// leave a field zero. There is no default time limit.
var DefaultLimits = events.Limits{MaxSteps: 100, MaxFailuresInRow: 5, MaxRepeats: 5}

// ApplyLimits returns the limits a run is recorded with when asked for
// asked, taking def's value for each zero field of asked: a positive field
// is kept, [NoLimit] becomes zero (recorded, and read by the loop, as "no
// limit"). def is itself a recorded set (zero: none). The run.created event
// holds the result, so the limits a run runs under are visible in its log.
//
// An error names the field and the value when a field is below [NoLimit].
func ApplyLimits(asked, def events.Limits) (events.Limits, error) {
	out := def
	for _, f := range []struct {
		name string
		v    int64
		into func(int64)
	}{
		{"max_steps", int64(asked.MaxSteps), func(v int64) { out.MaxSteps = int(v) }},
		{"max_failures_in_row", int64(asked.MaxFailuresInRow), func(v int64) { out.MaxFailuresInRow = int(v) }},
		{"max_repeats", int64(asked.MaxRepeats), func(v int64) { out.MaxRepeats = int(v) }},
		{"max_elapsed_ms", asked.MaxElapsedMS, func(v int64) { out.MaxElapsedMS = v }},
	} {
		switch {
		case f.v < NoLimit:
			return events.Limits{}, fmt.Errorf("limits: %s %d: want a positive number, 0 for the default or %d (driver.NoLimit) for no limit", f.name, f.v, NoLimit)
		case f.v == NoLimit:
			f.into(0)
		case f.v > 0:
			f.into(f.v)
		}
	}
	return out, nil
}

// DescribeLimits says in words what a run's recorded limits are, for a
// person: "100 steps, 5 failures in a row, 5 repeats, no time limit".
func DescribeLimits(l events.Limits) string {
	part := func(n int64, unit, none string) string {
		if n <= 0 {
			return none
		}
		return fmt.Sprintf("%d %s", n, unit)
	}
	return part(int64(l.MaxSteps), "steps", "no step limit") + ", " +
		part(int64(l.MaxFailuresInRow), "failures in a row", "no failure limit") + ", " +
		part(int64(l.MaxRepeats), "repeats", "no repeat limit") + ", " +
		part(l.MaxElapsedMS, "ms", "no time limit")
}
