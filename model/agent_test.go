package model_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/model"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// forEachWire runs test once per provider wire format.
func forEachWire(t *testing.T, test func(t *testing.T, w wire)) {
	for _, w := range wires {
		t.Run(w.provider, func(t *testing.T) { test(t, w) })
	}
}

// TestAgent_PlainRunToTheEnd: a tool call, then a text answer that ends
// the run with it; each reply recorded with its attempt before it.
func TestAgent_PlainRunToTheEnd(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		args := "{ \"path\" : \"notes.txt\" }"
		h := newHarness(t, w, nil,
			reply(w.tools("Reading the notes.", call{"c1", "read_file", args})),
			reply(w.text("The notes say ok.")))
		v := h.run("r1", "What do the notes say?")
		wantEnd(t, v, projector.Completed, events.ReasonCompleted)
		if v.Run.Result != "The notes say ok." {
			t.Errorf("result %q, want the model's answer", v.Run.Result)
		}
		if calls := h.read.Calls(); len(calls) != 1 || string(calls[0]) != `{"path":"notes.txt"}` {
			t.Errorf("read_file got %q, want the checked form of %q", calls, args)
		}
		recs := h.records("r1")
		want := []events.Kind{events.RunCreated, events.ModelAttempted, events.ModelReplied, events.StepDecided, events.StepObserved,
			events.ModelAttempted, events.ModelReplied, events.RunFinished}
		if got := kindsOf(recs); !slices.Equal(got, want) {
			t.Fatalf("kinds %v, want %v", got, want)
		}
		dec := bodiesOf[events.StepDecidedBody](t, recs, events.StepDecided)[0]
		if dec.Args != args || dec.CallID != "c1" || dec.Reason != "Reading the notes." {
			t.Errorf("decision %+v, want the model's exact call", dec)
		}
		att := bodiesOf[events.ModelAttemptBody](t, recs, events.ModelAttempted)
		if att[0].Call != 1 || att[1].Call != 2 || att[0].Attempt != 1 || att[0].SideEffect != events.SideEffectNone || att[0].Reserve.OutputTokens != 256 {
			t.Errorf("attempts %+v", att)
		}
		reps := bodiesOf[events.ModelReplyBody](t, recs, events.ModelReplied)
		if want := w.tools("Reading the notes.", call{"c1", "read_file", args}); reps[0].Response != want {
			t.Errorf("reply kept response %q, want the body exactly %q", reps[0].Response, want)
		}
		if got := (events.ModelUsage{Calls: 2, InputTokens: 200, OutputTokens: 40}); v.Model.Used != got {
			t.Errorf("used %+v, want %+v", v.Model.Used, got)
		}
		// The second request carries the call and its result.
		if n := len(h.srv.Requests()); n != 2 {
			t.Fatalf("%d requests, want 2", n)
		}
		body := string(h.srv.Requests()[1].Body)
		for _, s := range []string{"c1", "read_file", "What do the notes say?", "You are a careful assistant."} {
			if !strings.Contains(body, s) {
				t.Errorf("second request lacks %q: %s", s, body)
			}
		}
	})
}

// TestAgent_BadArgumentsGoBackToTheModel: arguments the check refuses
// are recorded as sent and the model is told why, then chooses again.
func TestAgent_BadArgumentsGoBackToTheModel(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := newHarness(t, w, nil,
			reply(w.tools("", call{"c1", "read_file", w.badArgs})),
			reply(w.text("I could not read it.")))
		v := h.run("r1", "read")
		wantEnd(t, v, projector.Completed, events.ReasonCompleted)
		s := v.Step(1)
		if string(s.Decision.RawArgs()) != w.badArgs || s.Observation.Kind != w.badKind {
			t.Errorf("step 1 %q observed %s, want %q observed %s", s.Decision.RawArgs(), s.Observation.Kind, w.badArgs, w.badKind)
		}
		if h.read.Count() != 0 {
			t.Errorf("read_file ran %d times, want 0", h.read.Count())
		}
		if body := string(h.srv.Requests()[1].Body); !strings.Contains(body, "error") {
			t.Errorf("the model was not told of the error: %s", body)
		}
	})
}

// TestAgent_UnknownTool: a call to a tool the run does not have is
// observed unknown_tool, and the model chooses again.
func TestAgent_UnknownTool(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := newHarness(t, w, nil,
			reply(w.tools("", call{"c1", "format_disk", `{}`})),
			reply(w.text("done")))
		v := h.run("r1", "go")
		wantEnd(t, v, projector.Completed, events.ReasonCompleted)
		if k := v.Step(1).Observation.Kind; k != events.ObsUnknownTool {
			t.Errorf("observed %s, want %s", k, events.ObsUnknownTool)
		}
	})
}

// TestAgent_SiblingCallsAreStepsWithoutAskingAgain: a reply with three
// calls is three steps, in order, and the model is asked once for them.
func TestAgent_SiblingCallsAreStepsWithoutAskingAgain(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := newHarness(t, w, nil,
			reply(w.tools("three reads", call{"a", "read_file", `{"path":"1"}`}, call{"b", "read_file", `{"path":"2"}`}, call{"c", "read_file", `{"path":"3"}`})),
			reply(w.text("read all three")))
		v := h.run("r1", "read them")
		wantEnd(t, v, projector.Completed, events.ReasonCompleted)
		if n := len(h.srv.Requests()); n != 2 {
			t.Errorf("%d requests, want 2 (one for the three calls)", n)
		}
		var ids []string
		for s := range v.Steps.All() {
			ids = append(ids, s.Decision.CallID+"="+s.Decision.Args)
		}
		if want := []string{`a={"path":"1"}`, `b={"path":"2"}`, `c={"path":"3"}`}; !slices.Equal(ids, want) {
			t.Errorf("steps %v, want %v", ids, want)
		}
	})
}

// TestAgent_ResumeTakesTheNextSiblingFromTheLog: a reply with two calls,
// the second needing approval: the run waits; a fresh driver and agent
// (another worker) resume it after the grant, execute the second call
// and never ask the model for the reply the log holds.
func TestAgent_ResumeTakesTheNextSiblingFromTheLog(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := newHarness(t, w, nil,
			reply(w.tools("", call{"a", "read_file", `{"path":"1"}`}, call{"b", "send_email", `{"to":"ops"}`})),
			reply(w.text("sent")))
		v := h.run("r1", "tell ops")
		if v.Run.Status != projector.Waiting {
			t.Fatalf("status %s, want waiting", v.Run.Status)
		}
		grant(t, h, "r1")
		other := h.newAgent()
		r, err := h.d.Load(t.Context(), "r1")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.d.Drive(t.Context(), r, other); err != nil {
			t.Fatalf("drive: %v", err)
		}
		v = h.view("r1")
		wantEnd(t, v, projector.Completed, events.ReasonCompleted)
		if h.read.Count() != 1 || h.send.Count() != 1 {
			t.Errorf("read ran %d, send %d times, want 1 and 1", h.read.Count(), h.send.Count())
		}
		if n := len(h.srv.Requests()); n != 2 {
			t.Errorf("%d requests, want 2", n)
		}
	})
}

// TestAgent_RetriesHonourRetryAfter: a 429 with Retry-After-Ms is
// recorded as a failure, waited for, and the next attempt's reply used.
func TestAgent_RetriesHonourRetryAfter(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := newHarness(t, w, nil,
			testkit.ModelReply{Status: 429, Header: http.Header{"Retry-After-Ms": {"150"}}, Body: `{"error":{"type":"rate_limit_error","message":"slow down"}}`},
			reply(w.text("ok")))
		start := time.Now()
		v := h.run("r1", "hi")
		took := time.Since(start)
		wantEnd(t, v, projector.Completed, events.ReasonCompleted)
		recs := h.records("r1")
		fails := bodiesOf[events.ModelFailBody](t, recs, events.ModelFailed)
		if len(fails) != 1 || fails[0].Status != 429 || !fails[0].Retryable || fails[0].RetryAfterMS != 150 || fails[0].Error != "slow down" {
			t.Fatalf("failures %+v, want one retryable 429 asking for 150ms", fails)
		}
		if took < 150*time.Millisecond {
			t.Errorf("retried after %s, before the 150ms the server asked for", took)
		}
		att := bodiesOf[events.ModelAttemptBody](t, recs, events.ModelAttempted)
		if len(att) != 2 || att[1].Call != 1 || att[1].Attempt != 2 {
			t.Errorf("attempts %+v, want call 1 attempts 1 and 2", att)
		}
		if got := h.srv.Requests()[1].Header.Get("X-Stainless-Retry-Count"); got != "" && got != "0" {
			t.Errorf("the SDK retried on its own (retry count %s)", got)
		}
	})
}

// TestAgent_ServerErrorsUntilTheRetryLimit: 500 on every attempt ends the
// run agent_error after 1+Retries attempts, each recorded.
func TestAgent_ServerErrorsUntilTheRetryLimit(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		fail := testkit.ModelReply{Status: 500, Body: `{"error":{"type":"api_error","message":"boom"}}`}
		h := newHarness(t, w, func(c *model.Config) { c.Retries = 2 }, fail, fail, fail, reply(w.text("never read")))
		v := h.run("r1", "hi")
		wantEnd(t, v, projector.Failed, events.ReasonAgentError)
		if !strings.Contains(v.Run.Detail, "boom") || !strings.Contains(v.Run.Detail, "3 attempts") {
			t.Errorf("detail %q, want the provider's message and the attempts", v.Run.Detail)
		}
		recs := h.records("r1")
		if n := len(bodiesOf[events.ModelFailBody](t, recs, events.ModelFailed)); n != 3 {
			t.Errorf("%d failures recorded, want 3", n)
		}
		if n := len(h.srv.Requests()); n != 3 {
			t.Errorf("%d requests, want 3", n)
		}
		if v.Model.Used.Calls != 3 || v.Model.Used.InputTokens != 0 {
			t.Errorf("used %+v, want 3 calls and no tokens", v.Model.Used)
		}
	})
}

// TestAgent_PermanentErrorEndsTheRun: a 400 is not retried; the run ends
// agent_error with the provider's message.
func TestAgent_PermanentErrorEndsTheRun(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := newHarness(t, w, nil,
			testkit.ModelReply{Status: 400, Body: `{"error":{"type":"invalid_request_error","message":"model m does not exist"}}`},
			reply(w.text("never read")))
		v := h.run("r1", "hi")
		wantEnd(t, v, projector.Failed, events.ReasonAgentError)
		if !strings.Contains(v.Run.Detail, "model m does not exist") {
			t.Errorf("detail %q lacks the provider's message", v.Run.Detail)
		}
		if n := len(h.srv.Requests()); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
}

// TestAgent_TimeoutAfterSendIsChargedItsReservation: an attempt that
// times out after its request was sent may have reached the model: it is
// charged what it reserved, and retried.
func TestAgent_TimeoutAfterSendIsChargedItsReservation(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := newHarness(t, w, func(c *model.Config) { c.Timeout = 300 * time.Millisecond; c.Retries = 1 },
			testkit.ModelReply{Hang: true}, reply(w.text("late but fine")))
		v := h.run("r1", "hi")
		wantEnd(t, v, projector.Completed, events.ReasonCompleted)
		recs := h.records("r1")
		fails := bodiesOf[events.ModelFailBody](t, recs, events.ModelFailed)
		att := bodiesOf[events.ModelAttemptBody](t, recs, events.ModelAttempted)
		if len(fails) != 1 || fails[0].Charge != att[0].Reserve || !strings.Contains(fails[0].Error, "timed out") {
			t.Fatalf("failures %+v, want one timeout charged %+v", fails, att[0].Reserve)
		}
		if want := att[0].Reserve.Add(events.ModelUsage{Calls: 1, InputTokens: 100, OutputTokens: 20}); v.Model.Used != want {
			t.Errorf("used %+v, want %+v", v.Model.Used, want)
		}
	})
}

// TestAgent_RepliesWithNoToolCall: a cut text, a refusal and an empty
// reply each end the run agent_error with their own error; the reply is
// recorded either way.
func TestAgent_RepliesWithNoToolCall(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		cases := []struct {
			name, body string
			want       error
		}{
			{"cut", w.cut("The answer is"), model.ErrCut},
			{"refusal", w.refusal("I can't help with that."), model.ErrRefused},
			{"empty", w.empty(), model.ErrEmpty},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				h := newHarness(t, w, nil, reply(c.body))
				v := h.run("r1", "hi")
				wantEnd(t, v, projector.Failed, events.ReasonAgentError)
				if !strings.HasPrefix(v.Run.Detail, c.want.Error()) {
					t.Errorf("detail %q, want it to start %q", v.Run.Detail, c.want)
				}
				if n := len(bodiesOf[events.ModelReplyBody](t, h.records("r1"), events.ModelReplied)); n != 1 {
					t.Errorf("%d replies recorded, want 1", n)
				}
			})
		}
	})
}

// TestAgent_CutToolCallIsRecordedAsSent: a tool call cut at the token
// limit keeps its cut arguments; the check refuses them and the model
// hears why.
func TestAgent_CutToolCallIsRecordedAsSent(t *testing.T) {
	h := newHarness(t, openAIWire, nil,
		reply(openAIWire.cut("", call{"c1", "read_file", `{"path": "no`})),
		reply(openAIWire.text("gave up")))
	v := h.run("r1", "hi")
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	if s := v.Step(1); s.Decision.Args != `{"path": "no` || s.Observation.Kind != events.ObsInvalidDecision {
		t.Errorf("step 1 %q observed %s, want the cut bytes refused", s.Decision.Args, s.Observation.Kind)
	}
}

// TestAgent_BudgetReached: by tokens and by spend, the run ends
// budget_exceeded before the attempt that would pass the budget, and the
// model is not asked.
func TestAgent_BudgetReached(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		cases := []struct {
			name   string
			budget model.Budget
			what   string
		}{
			// The first reply uses 100 in; the second attempt reserves
			// more than the 50 left.
			{"input tokens", model.Budget{InputTokens: 150}, "input tokens"},
			// 256 out reserved fits 270, 20 used and 256 more do not.
			{"output tokens", model.Budget{OutputTokens: 270}, "output tokens"},
			// $10/M in, $30/M out: a reply is $0.0016; the first attempt
			// reserves 10 out and its prompt (under $0.001), the second
			// as much again, more than the $0.0004 left.
			{"spend", model.Budget{SpendUSD: 0.002}, "spend"},
			{"calls", model.Budget{Calls: 1}, "model calls"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				h := newHarness(t, w, func(cfg *model.Config) {
					cfg.Budget = c.budget
					cfg.Prices = map[string]model.Price{"m": {Input: 10, Output: 30}}
					if c.name == "spend" {
						cfg.MaxTokens = 10
					}
				}, reply(w.tools("", call{"c1", "read_file", `{"path":"a"}`})), reply(w.text("never read")))
				v := h.run("r1", "hi")
				wantEnd(t, v, projector.Failed, events.ReasonBudgetExceeded)
				if !strings.HasPrefix(v.Run.Detail, c.what) {
					t.Errorf("detail %q, want it about %s", v.Run.Detail, c.what)
				}
				if n := len(h.srv.Requests()); n != 1 {
					t.Errorf("%d requests, want 1", n)
				}
				if h.read.Count() != 1 {
					t.Errorf("the step before the budget ran %d times, want 1", h.read.Count())
				}
				if c.name == "spend" && v.Model.Used.SpendNanoUSD != 1_600_000 {
					t.Errorf("spent %d nano-USD, want 1,600,000 ($10/M x 100 + $30/M x 20)", v.Model.Used.SpendNanoUSD)
				}
			})
		}
	})
}

// TestConfig_Validate: a config the agent cannot use is refused, naming
// what is wrong.
func TestConfig_Validate(t *testing.T) {
	cases := []struct {
		name string
		cfg  model.Config
		want string
	}{
		{"provider", model.Config{Provider: "gemini", Model: "m"}, `provider "gemini"`},
		{"model", model.Config{Provider: model.OpenAI}, "no model"},
		{"spend with no price", model.Config{Provider: model.OpenAI, Model: "m", Budget: model.Budget{SpendUSD: 1}, Prices: map[string]model.Price{"other": {}}}, `no price for model "m"`},
		{"negative budget", model.Config{Provider: model.Anthropic, Model: "m", Budget: model.Budget{Calls: -1}}, "negative"},
		{"negative raise", model.Config{Provider: model.OpenAI, Model: "m", Budget: model.Budget{Calls: 2}, OverBudget: model.OverBudget{Approve: true, Raise: model.Budget{OutputTokens: -5}}}, "over_budget: a raise or the expiry is negative"},
		{"negative expiry", model.Config{Provider: model.OpenAI, Model: "m", Budget: model.Budget{Calls: 2}, OverBudget: model.OverBudget{Approve: true, Expires: -time.Second}}, "over_budget: a raise or the expiry is negative"},
		{"approval with no budget", model.Config{Provider: model.OpenAI, Model: "m", OverBudget: model.OverBudget{Approve: true}}, "no budget to pass"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := model.New(c.cfg)
			if !errors.Is(err, model.ErrConfig) {
				t.Fatalf("got %v, want ErrConfig", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// TestFile_Config: the file's form becomes a checked config, and a file
// naming an unset key variable, a tool the worker lacks or a bad
// duration is refused, naming the field.
func TestFile_Config(t *testing.T) {
	env := map[string]string{"KEY": "secret"}
	getenv := func(k string) string { return env[k] }
	tools := []string{"read_file", "finish"}
	good := model.File{Provider: model.OpenAI, Model: "m", APIKeyEnv: "KEY", Tools: []string{"read_file"}, Timeout: "5s",
		Budget: model.FileBudget{SpendUSD: 1}, Prices: map[string]model.Price{"m": {Input: 1, Output: 2}}}
	c, err := good.Config(getenv, tools)
	if err != nil {
		t.Fatal(err)
	}
	if c.APIKey != "secret" || c.Timeout != 5*time.Second || c.MaxTokens != 1024 || c.Budget.SpendUSD != 1 {
		t.Errorf("config %+v", c)
	}
	over := good
	over.OverBudget = model.FileOverBudget{Approve: true, Raise: model.FileBudget{SpendUSD: 0.25}, Expires: "1h"}
	c, err = over.Config(getenv, tools)
	if err != nil {
		t.Fatal(err)
	}
	if want := (model.OverBudget{Approve: true, Raise: model.Budget{SpendUSD: 0.25}, Expires: time.Hour}); c.OverBudget != want {
		t.Errorf("over budget %+v, want %+v", c.OverBudget, want)
	}
	cases := []struct {
		name string
		edit func(f *model.File)
		want string
	}{
		{"unset key", func(f *model.File) { f.APIKeyEnv = "NOPE" }, "$NOPE"},
		{"unknown tool", func(f *model.File) { f.Tools = []string{"rm"} }, `no tool named "rm"`},
		{"bad duration", func(f *model.File) { f.Backoff = "soon" }, `backoff "soon"`},
		{"spend with no price", func(f *model.File) { f.Prices = nil }, "no price"},
		{"bad approval expiry", func(f *model.File) { f.OverBudget = model.FileOverBudget{Approve: true, Expires: "later"} }, `over_budget.expires "later"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := good
			tc.edit(&f)
			_, err := f.Config(getenv, tools)
			if !errors.Is(err, model.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrConfig saying %q", err, tc.want)
			}
		})
	}
}

// TestAgent_RetryAfterTooLongEndsTheCall: a server asking to wait longer
// than MaxRetryAfter is not waited for.
func TestAgent_RetryAfterTooLongEndsTheCall(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := newHarness(t, w, func(c *model.Config) { c.MaxRetryAfter = time.Second },
			testkit.ModelReply{Status: 429, Header: http.Header{"Retry-After": {"3600"}}, Body: `{"error":{"type":"rate_limit_error","message":"come back in an hour"}}`},
			reply(w.text("never read")))
		start := time.Now()
		v := h.run("r1", "hi")
		wantEnd(t, v, projector.Failed, events.ReasonAgentError)
		if !strings.Contains(v.Run.Detail, "retry after 1h0m0s") || time.Since(start) > 30*time.Second {
			t.Errorf("detail %q after %s, want the refusal to wait an hour, at once", v.Run.Detail, time.Since(start))
		}
		if n := len(h.srv.Requests()); n != 1 {
			t.Errorf("%d requests, want 1", n)
		}
	})
}

// TestAgent_ConnectionRefusedIsRetriedThenFails: no server at the base
// URL is a transport failure on every attempt, each charged its
// reservation (it might have reached a model), then ErrRetries.
func TestAgent_ConnectionRefusedIsRetriedThenFails(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		dead := httptest.NewServer(http.NotFoundHandler())
		url := dead.URL
		dead.Close()
		h := newHarness(t, w, func(c *model.Config) { c.BaseURL = url; c.Retries = 1 })
		v := h.run("r1", "hi")
		wantEnd(t, v, projector.Failed, events.ReasonAgentError)
		if !strings.HasPrefix(v.Run.Detail, model.ErrRetries.Error()) {
			t.Errorf("detail %q, want it to start %q", v.Run.Detail, model.ErrRetries)
		}
		recs := h.records("r1")
		fails := bodiesOf[events.ModelFailBody](t, recs, events.ModelFailed)
		att := bodiesOf[events.ModelAttemptBody](t, recs, events.ModelAttempted)
		if len(fails) != 2 || fails[0].Status != 0 || fails[0].Charge != att[0].Reserve {
			t.Errorf("failures %+v, want 2 transport failures charged their reservation", fails)
		}
	})
}

// TestAgent_WithoutRecorderRefusesToAsk: an agent handed no recorder
// asks no model (nothing it sent would be on the run).
func TestAgent_WithoutRecorderRefusesToAsk(t *testing.T) {
	h := newHarness(t, openAIWire, nil, reply(openAIWire.text("x")))
	_, err := h.agent.Decide(t.Context(), driver.StepInput{Run: projector.Run{ID: "r"}})
	if !errors.Is(err, model.ErrNoRecorder) {
		t.Errorf("got %v, want ErrNoRecorder", err)
	}
	if n := len(h.srv.Requests()); n != 0 {
		t.Errorf("%d requests, want 0", n)
	}
}

// TestAgent_SendsTemperatureAndLimits: the config's model, max tokens
// and temperature are in the request.
func TestAgent_SendsTemperatureAndLimits(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		temp := 0.25
		h := newHarness(t, w, func(c *model.Config) { c.Temperature = &temp; c.MaxTokens = 77 }, reply(w.text("ok")))
		h.run("r1", "hi")
		req := requestJSON(t, h.srv, 0)
		if req["temperature"] != 0.25 || req["max_tokens"] != 77.0 || req["model"] != "m" {
			t.Errorf("request %v, want model m, max_tokens 77, temperature 0.25", req)
		}
		if got := h.srv.Requests()[0].Header.Get("Authorization"); got != "Bearer test-key" && h.srv.Requests()[0].Header.Get("X-Api-Key") != "test-key" {
			t.Errorf("no API key sent (Authorization %q)", got)
		}
	})
}

// TestAgent_DeadWorkerAttemptIsChargedAndAskedAgain: an attempt recorded
// by a worker that died before its outcome is charged its reservation,
// and the agent asks again as the next attempt of the same call.
func TestAgent_DeadWorkerAttemptIsChargedAndAskedAgain(t *testing.T) {
	forEachWire(t, func(t *testing.T, w wire) {
		h := newHarness(t, w, nil, reply(w.text("here")))
		ctx := t.Context()
		r, err := h.d.Create(ctx, "r1", "model", []byte(`"hi"`))
		if err != nil {
			t.Fatal(err)
		}
		dead := events.ModelAttemptBody{Call: 1, Attempt: 1, Provider: w.provider, Model: "m", SideEffect: events.SideEffectNone,
			Reserve: events.ModelUsage{Calls: 1, InputTokens: 40, OutputTokens: 256}}
		ev, err := events.New("r1", events.ModelAttempted, dead)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.log.Append(ctx, r.Tail(), ev); err != nil {
			t.Fatal(err)
		}
		if err := h.d.Refresh(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := h.d.Drive(ctx, r, h.agent); err != nil {
			t.Fatal(err)
		}
		v := h.view("r1")
		wantEnd(t, v, projector.Completed, events.ReasonCompleted)
		att := bodiesOf[events.ModelAttemptBody](t, h.records("r1"), events.ModelAttempted)
		if len(att) != 2 || att[1].Call != 1 || att[1].Attempt != 2 {
			t.Fatalf("attempts %+v, want call 1 attempt 2 after the dead one", att)
		}
		if want := dead.Reserve.Add(events.ModelUsage{Calls: 1, InputTokens: 100, OutputTokens: 20}); v.Model.Used != want {
			t.Errorf("used %+v, want the dead attempt's reservation and the reply's usage %+v", v.Model.Used, want)
		}
	})
}

// TestAgent_LargeResponseIsRecordedWithoutItsBody: a body over
// MaxResponse is not kept (its size is), and the reply still decides.
func TestAgent_LargeResponseIsRecordedWithoutItsBody(t *testing.T) {
	body := openAIWire.text(strings.Repeat("long answer ", 100))
	h := newHarness(t, openAIWire, func(c *model.Config) { c.MaxResponse = 100 }, reply(body))
	v := h.run("r1", "hi")
	wantEnd(t, v, projector.Completed, events.ReasonCompleted)
	rep := bodiesOf[events.ModelReplyBody](t, h.records("r1"), events.ModelReplied)[0]
	if rep.Response != "" || rep.ResponseOmitted != len(body) || !strings.HasPrefix(v.Run.Result, "long answer") {
		t.Errorf("reply kept %d bytes, omitted %d, result %q; want none kept, %d omitted", len(rep.Response), rep.ResponseOmitted, clipped(v.Run.Result), len(body))
	}
	if _, err := testkit.RecordedReplies(h.records("r1")); err == nil {
		t.Errorf("recorded replies of a run with an omitted body: no error")
	}
}

func clipped(s string) string { return s[:min(len(s), 20)] }

// TestAgent_ReplyTooLargeForTheLog: a reply whose event would pass the
// server's message limit is recorded without its body; one too large
// even so is a recorded failure, charged what it used, and the run ends
// agent_error instead of asking again forever.
func TestAgent_ReplyTooLargeForTheLog(t *testing.T) {
	cases := []struct {
		name    string
		argsLen int
		want    projector.Status
	}{
		{"body left out", 600 << 10, projector.Completed},
		{"too large even so", 1100 << 10, projector.Failed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := `{"path":"` + strings.Repeat("a", c.argsLen) + `"}`
			h := newHarness(t, openAIWire, func(cfg *model.Config) { cfg.MaxResponse = 4 << 20 },
				reply(openAIWire.tools("", call{"c1", "read_file", args})), reply(openAIWire.text("done")))
			v := h.run("r1", "hi")
			if v.Run.Status != c.want {
				t.Fatalf("run %s %s (%s), want %s", v.Run.Status, v.Run.Reason, clipped(v.Run.Detail), c.want)
			}
			recs := h.records("r1")
			if c.want == projector.Completed {
				rep := bodiesOf[events.ModelReplyBody](t, recs, events.ModelReplied)[0]
				if rep.Response != "" || rep.ResponseOmitted == 0 || len(rep.ToolCalls[0].Args) != len(args) {
					t.Errorf("reply kept %d body bytes, omitted %d, args %d; want the body left out and the args whole", len(rep.Response), rep.ResponseOmitted, len(rep.ToolCalls[0].Args))
				}
				return
			}
			fails := bodiesOf[events.ModelFailBody](t, recs, events.ModelFailed)
			if len(fails) != 1 || fails[0].Charge.InputTokens != 100 || !strings.Contains(v.Run.Detail, "too large to record") {
				t.Errorf("failures %+v, detail %q; want one charged the reply's usage", fails, v.Run.Detail)
			}
			if n := len(h.srv.Requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}
