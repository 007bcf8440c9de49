package rules

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/policy"
)

// Windows counts calls in fixed windows shared by every worker: what a
// rule with `per: fleet` and `max_per_hour` counts in. Package kvwindows
// keeps them in a JetStream KV bucket.
type Windows interface {
	// Take counts one call in window key if fewer than max are counted
	// there, and returns how many were counted before, and whether this one
	// was.
	Take(ctx context.Context, key string, max int64) (before int64, taken bool, err error)
}

// ErrNoWindows: a per: fleet rule applied and the policy has no counter.
var ErrNoWindows = errors.New("no fleet window counter configured (rules.Policy.WithWindows)")

// windowKey names the hourly window of rule id that t falls in.
func windowKey(id string, t time.Time) string {
	return "rate." + strings.ReplaceAll(id, "/", ".") + "." + strconv.FormatInt(t.UTC().Truncate(time.Hour).Unix(), 10)
}

// fleetWindow reads (and counts this call in) the rule's fleet window for
// this step's recorded hour. In a replay it takes the recorded reading
// instead: the counter has moved on since, and the question is whether the
// same reading gives the same answer.
func (r *compiledRule) fleetWindow(ev *evaluation) (over bool, count, window string, reading int64, err error) {
	key := windowKey(r.id, ev.stepTime())
	if rec, ok := policy.Recorded(ev.ctx); ok {
		for _, p := range rec.Parts {
			if p.Window != "" && (p.ID == r.id || strings.HasSuffix(p.ID, " / "+r.id)) {
				over := p.Count >= r.perHour
				return over, fmt.Sprintf("%d of %d calls in the fleet's hour", p.Count, r.perHour), p.Window, p.Count, nil
			}
		}
		return false, "", "", 0, fmt.Errorf("no reading of window %s recorded", key)
	}
	if ev.windows == nil {
		return false, "", "", 0, ErrNoWindows
	}
	before, taken, err := ev.windows.Take(ev.ctx, key, r.perHour)
	if err != nil {
		return false, "", "", 0, fmt.Errorf("window %s: %w", key, err)
	}
	return !taken, fmt.Sprintf("%d of %d calls in the fleet's hour", before, r.perHour), key, before, nil
}
