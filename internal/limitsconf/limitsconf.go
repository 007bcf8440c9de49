// Package limitsconf is a run's limits as the worker's and the gateway's
// configuration files spell them.
package limitsconf

import (
	"fmt"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
)

// Config is events.Limits in a file: the limits of the runs a process
// creates. A field left out takes driver.DefaultLimits; -1 (max_elapsed:
// none) asks for no limit.
type Config struct {
	MaxSteps         int    `yaml:"max_steps"`
	MaxFailuresInRow int    `yaml:"max_failures_in_row"`
	MaxRepeats       int    `yaml:"max_repeats"`
	MaxElapsed       string `yaml:"max_elapsed"`
}

// Limits is c as events.Limits, checked as the driver checks the limits
// it is given: an error names the field and what was wrong with it.
func (c Config) Limits() (events.Limits, error) {
	out := events.Limits{MaxSteps: c.MaxSteps, MaxFailuresInRow: c.MaxFailuresInRow, MaxRepeats: c.MaxRepeats}
	if c.MaxElapsed == "none" {
		out.MaxElapsedMS = driver.NoLimit
	} else if c.MaxElapsed != "" {
		d, err := time.ParseDuration(c.MaxElapsed)
		if err != nil || d <= 0 {
			return out, fmt.Errorf("limits.max_elapsed %q: want a duration like \"30m\", or none", c.MaxElapsed)
		}
		out.MaxElapsedMS = d.Milliseconds()
	}
	if _, err := driver.ApplyLimits(out, driver.DefaultLimits); err != nil {
		return out, err
	}
	return out, nil
}
