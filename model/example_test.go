package model_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/model"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go/jetstream"
)

// A model agent drives a run: the model (here a server on 127.0.0.1 that
// speaks Chat Completions) asks to read a file, then answers in text, and
// the answer is the run's result. Each request and reply is on the run.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "arbiter-model-example")
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	nc, _ := srv.Connect()
	defer nc.Close()
	js, _ := jetstream.New(nc)
	log, err := events.Open(ctx, js, events.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}

	replies := []string{
		openAIBody("", "tool_calls", []call{{"call_1", "read_file", `{"path":"notes.txt"}`}}),
		openAIBody("The notes say: ok.", "stop", nil),
	}
	llm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, replies[0])
		replies = replies[1:]
	}))
	defer llm.Close()

	d, err := driver.New(driver.Config{
		Log: log, Policy: policy.WithID(policy.DefaultSideEffects(), "side-effects v1"),
		Tools: []driver.Tool{testkit.NewLedger("read_file", events.ReadOnly, `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	agent, err := model.New(model.Config{Provider: model.OpenAI, BaseURL: llm.URL + "/v1", Model: "local", System: "Answer from the files."})
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := d.Create(ctx, "example", "local", []byte(`"What do the notes say?"`))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := d.Drive(ctx, r, agent); err != nil {
		fmt.Println(err)
		return
	}
	v := r.View()
	fmt.Println(v.Run.Status, v.Run.Result)
	recs, _, _ := log.Read(ctx, "example")
	for _, rec := range recs {
		fmt.Println(rec.Event.Kind)
	}
	fmt.Printf("%d model calls, %d input and %d output tokens\n", v.Model.Used.Calls, v.Model.Used.InputTokens, v.Model.Used.OutputTokens)
	// Output:
	// COMPLETED The notes say: ok.
	// run.created
	// model.attempted
	// model.replied
	// step.decided
	// step.observed
	// model.attempted
	// model.replied
	// run.finished
	// 2 model calls, 200 input and 40 output tokens
}
