package traces_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/arbiter-run/arbiter/traces"
	"github.com/nats-io/nkeys"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// receiver is an OTLP/HTTP trace receiver on 127.0.0.1 that keeps every
// span it is sent.
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var msg collector.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(b, &msg) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range msg.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func attrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		if sv := kv.Value.GetStringValue(); sv != "" {
			m[kv.Key] = sv
		} else {
			m[kv.Key] = "int"
		}
	}
	return m
}

// TestTracer_SpanPerStepAcrossWorkers: a run paused for approval by one
// worker and finished by another gives one span per step, both in the
// run's trace, with the tool, outcome, policy id and timings, exported
// over OTLP to a receiver.
func TestTracer_SpanPerStepAcrossWorkers(t *testing.T) {
	j := testkit.JetStream(t)
	log := j.Log(t, events.Config{})
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	newDriver := func() *driver.Driver {
		d, err := driver.New(driver.Config{Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"), Operators: approvals.Operators{pub: "alice"},
			Tools: []driver.Tool{testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject), testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	agent := func() driver.Agent {
		return testkit.NewScript(testkit.Call("send", `{"to":"ops"}`), testkit.Call("done", `{}`))
	}
	a, b := newDriver(), newDriver()
	r, err := a.Create(t.Context(), "run-x", "mail", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Drive(t.Context(), r, agent()); err != nil {
		t.Fatal(err)
	}
	v := r.View()
	ap := v.PendingApproval()
	if ap == nil {
		t.Fatalf("run %s, want it waiting", v.Run.Status)
	}
	if _, err := client.New(log, nil).Grant(t.Context(), kp, "run-x", ap.ID, "ok"); err != nil {
		t.Fatal(err)
	}
	r2, err := b.Load(t.Context(), "run-x")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Drive(t.Context(), r2, agent()); err != nil {
		t.Fatal(err)
	}
	if st := r2.View().Run.Status; st != projector.Completed {
		t.Fatalf("run %s, want COMPLETED", st)
	}

	rcv := newReceiver(t)
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(rcv.srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	tr, err := traces.New(traces.Config{Log: log, Tracer: tp.Tracer("arbiter"), FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := tp.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.spans) != 2 {
		t.Fatalf("%d spans exported, want 2 (one per step)", len(rcv.spans))
	}
	want := traces.TraceID("run-x")
	for i, s := range rcv.spans {
		if string(s.TraceId) != string(want[:]) {
			t.Errorf("span %d in trace %x, want the run's %x", i, s.TraceId, want[:])
		}
		m := attrs(s)
		for _, k := range []string{"arbiter.run", "arbiter.tool", "arbiter.outcome", "arbiter.policy_id", "arbiter.decision_ms", "arbiter.policy_ms", "arbiter.tool_ms", "arbiter.appends_ms"} {
			if _, ok := m[k]; !ok {
				t.Errorf("span %d (%s) lacks %s: %v", i, s.Name, k, m)
			}
		}
		if m["arbiter.policy_id"] != "se" || m["arbiter.run"] != "run-x" {
			t.Errorf("span %d: %v", i, m)
		}
		if s.EndTimeUnixNano < s.StartTimeUnixNano {
			t.Errorf("span %d ends before it starts", i)
		}
	}
	send, done := attrs(rcv.spans[0]), attrs(rcv.spans[1])
	if send["arbiter.tool"] != "send" || send["arbiter.approval"] != ap.ID || done["arbiter.tool"] != "done" {
		t.Errorf("spans: %v then %v, want send (with approval %s) then done", send, done, ap.ID)
	}
	// The terminal tool's result travels in the run's end (ADR 0017): its
	// span still says what the step observed.
	if send["arbiter.observation"] != "result" || done["arbiter.observation"] != "result" {
		t.Errorf("observations: send %v, done %v, want result for both", send["arbiter.observation"], done["arbiter.observation"])
	}
	if _, ok := send["arbiter.approval_wait_ms"]; !ok {
		t.Errorf("the send span has no approval wait: %v", send)
	}
}

// TestTracer_StartsAtTheEnd: by default a tracer traces what happens from
// its start on: a run finished before gives no span, one after does.
func TestTracer_StartsAtTheEnd(t *testing.T) {
	j := testkit.JetStream(t)
	log := j.Log(t, events.Config{})
	d, err := driver.New(driver.Config{Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"),
		Tools: []driver.Tool{testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()}})
	if err != nil {
		t.Fatal(err)
	}
	finish := func(run string) {
		r, err := d.Create(t.Context(), run, "a", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Drive(t.Context(), r, testkit.NewScript(testkit.Call("done", `{}`))); err != nil {
			t.Fatal(err)
		}
	}
	finish("before")
	rcv := newReceiver(t)
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(rcv.srv.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	tr, err := traces.New(traces.Config{Log: log, Tracer: tp.Tracer("arbiter")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	finish("after")
	if err := tr.Step(t.Context()); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.spans) != 1 || attrs(rcv.spans[0])["arbiter.run"] != "after" {
		t.Errorf("spans %v, want one, of run after", rcv.spans)
	}
}
