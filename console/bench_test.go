package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/console"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nkeys"
)

// fill stores n runs on log, each a run.created, a decided step, its
// policy result and observation, and a run.finished (or, one in ten, still
// running), appended by 16 writers so runs interleave in the stream.
func fill(b *testing.B, log *events.Log, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if err := storeRun(ctx, log, fmt.Sprintf("run-%07d", i), i%10 != 0); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

func storeRun(ctx context.Context, log *events.Log, run string, finish bool) error {
	bodies := []struct {
		k    events.Kind
		body any
	}{
		{events.RunCreated, events.RunCreatedBody{Agent: "bench", Tools: []events.ToolSpec{{Name: "done", SideEffect: events.ReadOnly, Schema: []byte(`{"type":"object"}`), TimeoutMS: 1000, Terminal: true}}}},
		{events.StepDecided, events.StepDecidedBody{Step: 1, Tool: "done", Args: `{}`}},
		{events.StepPolicy, events.PolicyBody{Step: 1, Outcome: "allow", Reason: "read_only tool done", PolicyID: "bench", Args: []byte(`{}`)}},
		{events.StepObserved, events.ObservedBody{Step: 1, Kind: events.ObsResult, Content: "ok"}},
		{events.RunFinished, events.EndBody{Reason: events.ReasonCompleted, Result: "ok"}},
	}
	if !finish {
		bodies = bodies[:1]
	}
	tail := events.Tail{}
	for _, x := range bodies {
		ev, err := events.New(run, x.k, x.body)
		if err != nil {
			return err
		}
		if tail, err = log.Append(ctx, tail, ev); err != nil {
			return fmt.Errorf("store %s %s: %w", run, x.k, err)
		}
	}
	return nil
}

// BenchmarkRunList_FirstPage: the console's first page of runs (50, read
// and folded, rendered) with 100 runs in the stream and with 100k, side by
// side. The goal is within 1.5x and under 100 ms: the list reads only the
// runs it shows.
func BenchmarkRunList_FirstPage(b *testing.B) {
	sizes := []int{100, 100_000}
	handlers := make([]http.Handler, len(sizes))
	cookies := make([]*http.Cookie, len(sizes))
	for i, n := range sizes {
		j := testkit.JetStream(b)
		log := j.Log(b, events.Config{})
		fill(b, log, n)
		kp, _ := nkeys.CreateUser()
		s, err := console.New(console.Config{Log: log, Queue: fleet.NewQueue(j.JS, fleet.Config{}), Key: kp})
		if err != nil {
			b.Fatal(err)
		}
		handlers[i] = s.Handler()
		cookies[i] = &http.Cookie{Name: "arbiter_console", Value: s.Token()}
	}
	runtime.GC() // the fill's garbage is not the first measurement's
	for i, n := range sizes {
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/", nil)
				req.AddCookie(cookies[i])
				rec := httptest.NewRecorder()
				handlers[i].ServeHTTP(rec, req)
				if rec.Code != http.StatusOK || strings.Count(rec.Body.String(), `<tr class="run"`) != 50 {
					b.Fatalf("first page: %d, %d runs", rec.Code, strings.Count(rec.Body.String(), `<tr class="run"`))
				}
			}
		})
	}
}
