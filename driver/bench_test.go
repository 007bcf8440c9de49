package driver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/testkit"
)

// BenchmarkRun drives whole runs of 10, 100 and 1,000 steps with small and
// 8 KiB observations and reports time, bytes and allocations per step. The
// per-step cost must not grow with the steps before it.
func BenchmarkRun(b *testing.B) {
	env := testkit.JetStream(b)
	log := env.Log(b, events.Config{})
	for _, size := range []int{16, 8 << 10} {
		result := strings.Repeat("x", size)
		read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
		read.Result = func(context.Context, json.RawMessage) (string, error) { return result, nil }
		done := testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()
		for _, steps := range []int{10, 100, 1000} {
			d, err := driver.New(driver.Config{
				Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "bench"),
				Tools:  []driver.Tool{read, done},
				Limits: events.Limits{MaxSteps: steps + 1, MaxRepeats: steps + 1},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("obs=%dB/steps=%d", size, steps), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					r, err := d.Create(ctx, events.NewID(), "bench", nil)
					if err != nil {
						b.Fatal(err)
					}
					if err := d.Drive(ctx, r, testkit.Counter{Tool: "read", Steps: steps}); err != nil {
						b.Fatal(err)
					}
					if st := r.View().Run.Status; st != "COMPLETED" {
						b.Fatalf("run ended %s %s", st, r.View().Run.Reason)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*steps), "ns/step")
			})
		}
	}
}
