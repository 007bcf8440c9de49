package model_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/model"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// BenchmarkStep drives whole runs of 10, 100 and 1,000 steps, side by
// side, with a scripted agent and with a model agent asking a local
// Chat Completions server that answers at once, and reports the time per
// step and the request bytes per model call. The model agent's cost
// beyond the scripted one is its own: rendering, the SDK's encoding and
// parsing, the HTTP round trip and its two events.
func BenchmarkStep(b *testing.B) {
	env := testkit.JetStream(b)
	log := env.Log(b, events.Config{})
	var calls atomic.Int64
	var reqBytes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		reqBytes.Add(n)
		k := calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, openAIBody("", "tool_calls", []call{{fmt.Sprintf("c%d", k), "read", fmt.Sprintf(`{"n":%d}`, k)}}))
	}))
	b.Cleanup(srv.Close)
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	agent, err := model.New(model.Config{Provider: model.OpenAI, BaseURL: srv.URL + "/v1", Model: "m", System: "Read things."})
	if err != nil {
		b.Fatal(err)
	}
	for _, steps := range []int{10, 100, 1000} {
		d, err := driver.New(driver.Config{
			Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "bench"),
			Tools:  []driver.Tool{read},
			Limits: events.Limits{MaxSteps: steps, MaxRepeats: steps + 1},
		})
		if err != nil {
			b.Fatal(err)
		}
		agents := []struct {
			name string
			a    driver.Agent
		}{{"scripted", testkit.Counter{Tool: "read", Steps: steps + 10}}, {"model", agent}}
		for _, ag := range agents {
			b.Run(fmt.Sprintf("steps=%d/agent=%s", steps, ag.name), func(b *testing.B) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				defer cancel()
				b.ReportAllocs()
				calls.Store(0)
				reqBytes.Store(0)
				for i := 0; i < b.N; i++ {
					r, err := d.Create(ctx, events.NewID(), "bench", []byte(`"read everything"`))
					if err != nil {
						b.Fatal(err)
					}
					if err := d.Drive(ctx, r, ag.a); err != nil {
						b.Fatal(err)
					}
					if v := r.View(); v.Run.Status != projector.Failed || v.Run.Reason != string(events.ReasonStepLimit) || v.Run.Steps != steps {
						b.Fatalf("run ended %s %s after %d steps, want the step limit after %d", v.Run.Status, v.Run.Reason, v.Run.Steps, steps)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*steps), "ns/step")
				if n := calls.Load(); n > 0 {
					b.ReportMetric(float64(reqBytes.Load())/float64(n), "reqB/call")
				}
			})
		}
	}
}
