package model

import (
	"encoding/json"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/render"
	"github.com/openai/openai-go/v3"
)

// FuzzReplies: whatever body a server sends, reading it and deciding
// from it never panics, and every tool call's decision carries the
// arguments exactly as the reply read them.
func FuzzReplies(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"content":"hi","tool_calls":[{"id":"a","function":{"name":"t","arguments":"{\"x\":"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1}}`))
	f.Add([]byte(`{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"a","name":"t","input":{"x":[1,2]}}],"stop_reason":"tool_use"}`))
	f.Add([]byte(`{"choices":[]}`))
	f.Add([]byte(`{"content":[],"stop_reason":"refusal"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var oc openai.ChatCompletion
		if json.Unmarshal(body, &oc) == nil {
			check(t, openAIReply(&oc))
		}
		var am anthropic.Message
		if json.Unmarshal(body, &am) == nil {
			check(t, anthropicReply(&am))
		}
	})
}

func check(t *testing.T, r events.ModelReplyBody) {
	t.Helper()
	for k, tc := range r.ToolCalls {
		d, err := decide(r, k)
		if err != nil || d.Tool != tc.Name || string(d.Args) != tc.Args || d.CallID != tc.ID || d.Final != nil {
			t.Fatalf("call %d %+v: decided %+v, %v", k, tc, d, err)
		}
	}
	d, err := decide(r, len(r.ToolCalls))
	if err == nil && (d.Final == nil || d.Final.Text != r.Text || r.Text == "") {
		t.Fatalf("after the calls: decided %+v with no error, want the text %q as the answer", d, r.Text)
	}
}

// FuzzOpenAITurn: whatever the model's text, call and the tool's result
// hold, a turn renders to the bytes the SDK's params encode to.
func FuzzOpenAITurn(f *testing.F) {
	for i, a := range awkward {
		f.Add(a, awkward[(i+1)%len(awkward)], awkward[(i+2)%len(awkward)], a, awkward[(i+3)%len(awkward)])
	}
	f.Fuzz(func(t *testing.T, text, id, name, args, content string) {
		sameAsSDK(t, render.Turn{Text: text, Call: render.ToolCall{ID: id, Name: name, Arguments: args}, Result: &render.ToolResult{CallID: id, Content: content}})
	})
}

// FuzzAnthropicTurn: whatever the model's text, call and arguments and
// the tool's result hold, a turn renders to the bytes the SDK's params
// encode to.
func FuzzAnthropicTurn(f *testing.F) {
	for i, a := range awkward {
		f.Add(a, awkward[(i+1)%len(awkward)], awkward[(i+2)%len(awkward)], awkward[(i+3)%len(awkward)], a, i%2 == 0)
	}
	f.Fuzz(func(t *testing.T, text, id, name, args, content string, isError bool) {
		sameAsAnthropicSDK(t, render.Turn{Text: text, Call: render.ToolCall{ID: id, Name: name, Arguments: args}, Result: &render.ToolResult{CallID: id, Content: content, IsError: isError}})
	})
}
