package model_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/model"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

const (
	pathSchema = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`
	toSchema   = `{"type":"object","properties":{"to":{"type":"string"}},"required":["to"]}`
)

// harness is one driver on an embedded JetStream, with a model agent
// that asks a scripted server in one wire format.
type harness struct {
	t     *testing.T
	w     wire
	log   *events.Log
	d     *driver.Driver
	srv   *testkit.ModelServer
	agent *model.Agent
	read  *testkit.Ledger
	send  *testkit.Ledger
	cfg   model.Config
}

// newHarness builds a harness; edit changes the agent's config (nil:
// none). Retries wait 1ms.
func newHarness(t *testing.T, w wire, edit func(*model.Config), replies ...testkit.ModelReply) *harness {
	t.Helper()
	env := testkit.JetStream(t)
	h := &harness{t: t, w: w, log: env.Log(t, events.Config{}), srv: testkit.NewModelServer(t, replies...)}
	h.read = testkit.NewLedger("read_file", events.ReadOnly, pathSchema)
	h.send = testkit.NewLedger("send_email", events.RemoteMutation, toSchema)
	_, ops := operator(t)
	d, err := driver.New(driver.Config{Log: h.log, Policy: policy.WithID(policy.DefaultSideEffects(), "side-effects default"),
		Tools: []driver.Tool{h.read, h.send}, Operators: ops})
	if err != nil {
		t.Fatalf("driver.New: %v", err)
	}
	h.d = d
	h.cfg = model.Config{Provider: w.provider, BaseURL: w.base(h.srv), Model: "m", APIKey: "test-key",
		System: "You are a careful assistant.", MaxTokens: 256, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Timeout: 5 * time.Second}
	if edit != nil {
		edit(&h.cfg)
	}
	h.agent = h.newAgent()
	return h
}

func (h *harness) newAgent() *model.Agent {
	h.t.Helper()
	a, err := model.New(h.cfg)
	if err != nil {
		h.t.Fatalf("model.New: %v", err)
	}
	return a
}

// run creates run id with input and drives it until it ends or waits.
func (h *harness) run(id, input string) projector.View {
	h.t.Helper()
	in, _ := json.Marshal(input)
	r, err := h.d.Create(h.t.Context(), id, "model", in)
	if err != nil {
		h.t.Fatalf("create %s: %v", id, err)
	}
	if err := h.d.Drive(h.t.Context(), r, h.agent); err != nil {
		h.t.Fatalf("drive %s: %v", id, err)
	}
	return h.view(id)
}

func (h *harness) view(id string) projector.View {
	h.t.Helper()
	r, err := h.d.Load(h.t.Context(), id)
	if err != nil {
		h.t.Fatalf("load %s: %v", id, err)
	}
	return r.View()
}

func (h *harness) records(id string) []events.Record {
	h.t.Helper()
	recs, _, err := h.log.Read(h.t.Context(), id)
	if err != nil {
		h.t.Fatalf("read %s: %v", id, err)
	}
	return recs
}

func reply(body string) testkit.ModelReply { return testkit.ModelReply{Body: body} }

func kindsOf(recs []events.Record) []events.Kind {
	out := make([]events.Kind, len(recs))
	for i, r := range recs {
		out[i] = r.Event.Kind
	}
	return out
}

func bodiesOf[T any](t *testing.T, recs []events.Record, k events.Kind) []T {
	t.Helper()
	var out []T
	for _, r := range recs {
		if r.Event.Kind != k {
			continue
		}
		b, err := events.DecodeBody[T](r.Event)
		if err != nil {
			t.Fatalf("decode %s: %v", k, err)
		}
		out = append(out, b)
	}
	return out
}

// wantEnd takes an end reason, or the approval kind a waiting run names.
func wantEnd[R ~string](t *testing.T, v projector.View, status projector.Status, reason R) {
	t.Helper()
	if v.Run.Status != status || v.Run.Reason != string(reason) {
		t.Fatalf("run ended %s %q (%s), want %s %q", v.Run.Status, v.Run.Reason, v.Run.Detail, status, reason)
	}
}

// requestJSON decodes request i the server received.
func requestJSON(t *testing.T, s *testkit.ModelServer, i int) map[string]any {
	t.Helper()
	reqs := s.Requests()
	if i >= len(reqs) {
		t.Fatalf("request %d of %d", i, len(reqs))
	}
	var m map[string]any
	if err := json.Unmarshal(reqs[i].Body, &m); err != nil {
		t.Fatalf("request %d: %v", i, err)
	}
	return m
}
