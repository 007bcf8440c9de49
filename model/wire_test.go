package model_test

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/model"
	"github.com/arbiter-run/arbiter/testkit"
)

// call is one tool call a scripted reply makes.
type call struct{ id, name, args string }

// wire writes replies in one provider's wire format, as its API sends
// them. Every reply reports 100 input and 20 output tokens.
type wire struct {
	provider string
	base     func(s *testkit.ModelServer) string
	tools    func(text string, calls ...call) string
	text     func(text string) string
	cut      func(text string, calls ...call) string
	refusal  func(text string) string
	empty    func() string
	// badArgs are arguments the format can carry that fail the tool's
	// check, and the observation kind they get.
	badArgs string
	badKind events.ObservationKind
}

var wires = []wire{openAIWire, anthropicWire}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

var openAIWire = wire{
	provider: model.OpenAI,
	base:     func(s *testkit.ModelServer) string { return s.URL + "/v1" },
	tools:    func(text string, calls ...call) string { return openAIBody(text, "tool_calls", calls) },
	text:     func(text string) string { return openAIBody(text, "stop", nil) },
	cut:      func(text string, calls ...call) string { return openAIBody(text, "length", calls) },
	refusal: func(text string) string {
		return `{"id":"chatcmpl-r","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":` + jsonString(text) + `},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120}}`
	},
	empty:   func() string { return openAIBody("", "stop", nil) },
	badArgs: `{"path": "notes.txt"`,
	badKind: "invalid_decision",
}

func openAIBody(text, finish string, calls []call) string {
	content := "null"
	if text != "" {
		content = jsonString(text)
	}
	var tcs []string
	for _, c := range calls {
		tcs = append(tcs, fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}`, c.id, c.name, jsonString(c.args)))
	}
	tc := ""
	if len(tcs) > 0 {
		tc = `,"tool_calls":[` + strings.Join(tcs, ",") + `]`
	}
	return `{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":` + content + tc + `},"finish_reason":"` + finish + `"}],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120}}`
}

var anthropicWire = wire{
	provider: model.Anthropic,
	base:     func(s *testkit.ModelServer) string { return s.URL },
	tools:    func(text string, calls ...call) string { return anthropicBody(text, "tool_use", calls) },
	text:     func(text string) string { return anthropicBody(text, "end_turn", nil) },
	cut:      func(text string, calls ...call) string { return anthropicBody(text, "max_tokens", calls) },
	refusal:  func(text string) string { return anthropicBody(text, "refusal", nil) },
	empty:    func() string { return anthropicBody("", "end_turn", nil) },
	badArgs:  `{"path": 7}`,
	badKind:  "invalid_arguments",
}

func anthropicBody(text, stop string, calls []call) string {
	var blocks []string
	if text != "" {
		blocks = append(blocks, `{"type":"text","text":`+jsonString(text)+`}`)
	}
	for _, c := range calls {
		blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":%q,"name":%q,"input":%s}`, c.id, c.name, c.args))
	}
	return `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[` + strings.Join(blocks, ",") + `],"stop_reason":"` + stop + `","stop_sequence":null,"usage":{"input_tokens":100,"output_tokens":20}}`
}
