package model_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"sync"
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

// BenchmarkStep drives whole runs of 10, 100 and 1,000 steps with a
// scripted agent and with a model agent asking a local Chat Completions
// server (httptest on 127.0.0.1) that answers at once with one tool
// call, and times beside them, for the same history, the floors the
// model step stands on:
//
//   - floor-http: a bare net/http POST of each request the agent sent
//     in a run (its very bytes) to the same server, reading the reply;
//   - floor-sdk: the same requests through the agent's own SDK client
//     (model.Agent.SendBody), the reply read into the SDK's types;
//   - floor-appends: the agent's two events of each step (their recorded
//     bytes) appended to a fresh run, fenced, with events.Log.Append;
//   - floor-chain: the two, in a step's order: the attempt appended, the
//     SDK call, the reply appended. Run back to back, the floors above
//     find the server and the connections warm; here, as in a step, each
//     hop wakes what the other left idle. It is the least a model step
//     can add with this SDK and the two events ADR 0009 stores.
//
// One iteration is a round of the six, in rotating order so that each
// sees the same load. Every figure is per step (a floor's per request,
// or per pair of appends), and each is also reported as a ratio to the
// scripted step: added/scripted is (model - scripted) / scripted, the
// issue's 0.3x goal at 10 steps; own/scripted is (model - scripted -
// floor-chain) / scripted, the added cost that is the agent's own code
// and the driver's handling of its events (rendering, building the body,
// budgets, decoding the reply, encoding and folding the events).
func BenchmarkStep(b *testing.B) {
	env := testkit.JetStream(b)
	log := env.Log(b, events.Config{})
	srv := newChatServer(b)
	read := testkit.NewLedger("read", events.ReadOnly, testkit.AnyObject)
	agent, err := model.New(model.Config{Provider: model.OpenAI, BaseURL: srv.URL + "/v1", Model: "m", System: "Read things."})
	if err != nil {
		b.Fatal(err)
	}
	bare := &http.Client{}
	for _, steps := range []int{10, 100, 1000} {
		d, err := driver.New(driver.Config{
			Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "bench"),
			Tools:  []driver.Tool{read},
			Limits: events.Limits{MaxSteps: steps, MaxRepeats: steps + 1},
		})
		if err != nil {
			b.Fatal(err)
		}
		scripted := testkit.Counter{Tool: "read", Steps: steps + 10}
		b.Run(fmt.Sprintf("steps=%d", steps), func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			defer cancel()
			drive := func(a driver.Agent) string {
				r, err := d.Create(ctx, events.NewID(), "bench", []byte(`"read everything"`))
				if err != nil {
					b.Fatal(err)
				}
				if err := d.Drive(ctx, r, a); err != nil {
					b.Fatal(err)
				}
				if v := r.View(); v.Run.Status != projector.Failed || v.Run.Reason != string(events.ReasonStepLimit) || v.Run.Steps != steps {
					b.Fatalf("run ended %s %s after %d steps, want the step limit after %d", v.Run.Status, v.Run.Reason, v.Run.Steps, steps)
				}
				return r.ID()
			}
			// One model run first: the floors send its requests and
			// append its events.
			srv.capture(true)
			id := drive(agent)
			reqs := srv.capture(false)
			pairs := modelEvents(b, log, id)
			if len(reqs) != steps || len(pairs) != 2*steps {
				b.Fatalf("the model run sent %d requests and recorded %d model events, want %d and %d", len(reqs), len(pairs), steps, 2*steps)
			}
			sides := []*side{
				{name: "scripted", do: func() { drive(scripted) }},
				{name: "model", do: func() { drive(agent) }},
				{name: "floor-http", do: func() {
					for _, body := range reqs {
						if err := post(ctx, bare, srv.URL+"/v1/chat/completions", body); err != nil {
							b.Fatal(err)
						}
					}
				}},
				{name: "floor-sdk", do: func() {
					for _, body := range reqs {
						if err := agent.SendBody(ctx, body); err != nil {
							b.Fatal(err)
						}
					}
				}},
				{name: "floor-appends", do: func() {
					app := appender{log: log, run: events.NewID()}
					for _, e := range pairs {
						app.append(ctx, b, e)
					}
				}},
				{name: "floor-chain", do: func() {
					app := appender{log: log, run: events.NewID()}
					for i, body := range reqs {
						app.append(ctx, b, pairs[2*i])
						if err := agent.SendBody(ctx, body); err != nil {
							b.Fatal(err)
						}
						app.append(ctx, b, pairs[2*i+1])
					}
				}},
			}
			b.ResetTimer()
			for i := range b.N {
				for k := range sides {
					sides[(i+k)%len(sides)].time()
				}
			}
			b.StopTimer()
			per := map[string]float64{}
			for _, s := range sides {
				per[s.name] = float64(s.took.Nanoseconds()) / float64(b.N*steps)
				b.ReportMetric(per[s.name], s.name+"-ns/step")
			}
			for _, s := range sides[:2] {
				b.ReportMetric(float64(s.allocs)/float64(b.N*steps), s.name+"-allocs/step")
			}
			sc, m := per["scripted"], per["model"]
			b.ReportMetric(m/sc, "model/scripted")
			b.ReportMetric((m-sc)/sc, "added/scripted")
			for _, f := range []string{"floor-http", "floor-sdk", "floor-appends", "floor-chain"} {
				b.ReportMetric(per[f]/sc, f+"/scripted")
			}
			b.ReportMetric((m-sc-per["floor-chain"])/sc, "own/scripted")
			n := 0
			for _, r := range reqs {
				n += len(r)
			}
			b.ReportMetric(float64(n)/float64(len(reqs)), "reqB/call")
		})
	}
}

// side is one of BenchmarkStep's measurements: its total time and heap
// allocations over the rounds.
type side struct {
	name   string
	do     func()
	took   time.Duration
	allocs uint64
}

func (s *side) time() {
	a := heapAllocs()
	t := time.Now()
	s.do()
	s.took += time.Since(t)
	s.allocs += heapAllocs() - a
}

// heapAllocs is the process's heap allocations so far (objects), read
// without stopping the world.
func heapAllocs() uint64 {
	m := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}

// chatServer answers every Chat Completions request at once with one
// call of the tool read, and keeps the requests' bodies while capturing.
type chatServer struct {
	*httptest.Server
	calls     atomic.Int64
	mu        sync.Mutex
	capturing bool
	bodies    [][]byte
}

func newChatServer(b *testing.B) *chatServer {
	s := &chatServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		if s.capturing {
			s.bodies = append(s.bodies, body)
		}
		s.mu.Unlock()
		k := s.calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, openAIBody("", "tool_calls", []call{{fmt.Sprintf("c%d", k), "read", fmt.Sprintf(`{"n":%d}`, k)}}))
	}))
	b.Cleanup(s.Close)
	return s
}

// capture turns capturing on or off, and returns the bodies captured
// since it was last turned on.
func (s *chatServer) capture(on bool) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.bodies
	s.capturing, s.bodies = on, nil
	return out
}

// post sends body as a bare net/http POST and reads the whole reply.
func post(ctx context.Context, c *http.Client, url string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK || len(out) == 0 {
		return fmt.Errorf("post: %s: %q", res.Status, out)
	}
	return nil
}

// appender appends events to one run, fenced, each a copy of a recorded
// event with a fresh id.
type appender struct {
	log  *events.Log
	run  string
	tail events.Tail
}

func (a *appender) append(ctx context.Context, b *testing.B, e events.Event) {
	e.ID, e.Run, e.Time = events.NewID(), a.run, time.Now().UTC()
	tail, err := a.log.Append(ctx, a.tail, e)
	if err != nil {
		b.Fatal(err)
	}
	a.tail = tail
}

// modelEvents is run's model.attempted and model.replied events, in order.
func modelEvents(b *testing.B, log *events.Log, run string) []events.Event {
	b.Helper()
	recs, _, err := log.Read(context.Background(), run)
	if err != nil {
		b.Fatal(err)
	}
	var out []events.Event
	for _, r := range recs {
		if r.Event.Kind == events.ModelAttempted || r.Event.Kind == events.ModelReplied {
			out = append(out, r.Event)
		}
	}
	return out
}
