package model

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/render"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
)

func history(n int) projector.Steps {
	steps := make([]projector.Step, n)
	for i := range steps {
		steps[i] = projector.Step{N: i + 1,
			Decision:    events.StepDecidedBody{Step: i + 1, Tool: "read", Args: fmt.Sprintf(`{"n":%d}`, i+1), CallID: fmt.Sprintf("c%d", i+1)},
			Observation: &events.ObservedBody{Step: i + 1, Kind: events.ObsResult, Content: "ok"}}
	}
	return projector.StepsOf(steps...)
}

// TestAgent_ConversationRendersOnlyNewSteps: with a run's conversation
// cached, the next step renders only its own turn, and the messages are
// the same as rendering every step afresh.
func TestAgent_ConversationRendersOnlyNewSteps(t *testing.T) {
	for _, provider := range []string{OpenAI, Anthropic} {
		a, err := New(Config{Provider: provider, Model: "m", System: "s"})
		if err != nil {
			t.Fatal(err)
		}
		in := driver.StepInput{Run: projector.Run{ID: "r", Input: json.RawMessage(`"go"`)}, Steps: history(5)}
		a.convs.put("r", a.conversation(in))
		in.Steps = history(6)
		c := a.conversation(in)
		fresh, err := New(Config{Provider: provider, Model: "m", System: "s"})
		if err != nil {
			t.Fatal(err)
		}
		want := fresh.conversation(in)
		if c.steps() != 6 || c.size() != want.size() {
			t.Errorf("%s: cached %d steps %d bytes, fresh %d steps %d bytes", provider, c.steps(), c.size(), want.steps(), want.size())
		}
		if msgsJSON(t, c) != msgsJSON(t, want) {
			t.Errorf("%s: cached conversation differs from a fresh one", provider)
		}
	}
}

// awkward are strings each JSON encoder may write its own way: HTML's
// characters, the separators JavaScript reads as line ends, control
// bytes, quotes, invalid UTF-8.
var awkward = []string{"", "ok", `<a href="x">&amp;</a>`, "</script>", "\u2028 and \u2029", "\x00\x01\x1f\x7f",
	"\b\f\n\r\t", "bad \xff\xfe bytes", "\xe2\x80", "é 日本 🙂", `\"quoted\" \\`, `{"path":"notes.txt"}`, "\ufeff\ufffd",
	"{ \"a\" : \"<b>&\u2028\" ,\n \"n\": [1, 2.5e3, null, true] }", "{\"bad\":\"\xff\"}", "[1]", "{\"x\":"}

// TestOpenAITurn_SameAsSDK: the assistant's message and the tool message
// a turn renders to are the bytes json.Marshal writes for the SDK's own
// params, whatever the strings hold.
func TestOpenAITurn_SameAsSDK(t *testing.T) {
	for i, a := range awkward {
		for _, b := range awkward {
			sameAsSDK(t, render.Turn{Text: a, Call: render.ToolCall{ID: b, Name: awkward[(i+1)%len(awkward)], Arguments: a + b},
				Result: &render.ToolResult{CallID: b, Content: a}})
		}
	}
}

// sameAsSDK fails t unless tr renders as the SDK's params encode.
func sameAsSDK(t *testing.T, tr render.Turn) {
	t.Helper()
	var c openAIConv
	c.add([]render.Turn{tr})
	call := openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
		ID:       tr.Call.ID,
		Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tr.Call.Name, Arguments: tr.Call.Arguments},
	}}
	asst := openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{call}}
	if tr.Text != "" {
		asst.Content.OfString = param.NewOpt(tr.Text)
	}
	var want messages
	want.push(openai.ChatCompletionMessageParamUnion{OfAssistant: &asst})
	want.push(openai.ToolMessage(tr.Result.Content, tr.Result.CallID))
	if want.err != nil {
		t.Fatalf("the SDK's params: %v", want.err)
	}
	if string(c.buf) != string(want.buf) {
		t.Fatalf("turn %+v:\n got %s\nwant %s", tr, c.buf, want.buf)
	}
}

// TestAnthropicTurn_SameAsSDK: the assistant's message and the user
// message with the tool result a turn renders to are the bytes
// json.Marshal writes for the SDK's own params, whatever the strings and
// the arguments hold.
func TestAnthropicTurn_SameAsSDK(t *testing.T) {
	for i, a := range awkward {
		for _, b := range awkward {
			sameAsAnthropicSDK(t, render.Turn{Text: a, Call: render.ToolCall{ID: b, Name: awkward[(i+1)%len(awkward)], Arguments: b},
				Result: &render.ToolResult{CallID: b, Content: a, IsError: i%2 == 0}})
		}
	}
}

// sameAsAnthropicSDK fails t unless tr renders as the SDK's params
// encode.
func sameAsAnthropicSDK(t *testing.T, tr render.Turn) {
	t.Helper()
	var c anthropicConv
	c.add([]render.Turn{tr})
	var blocks []anthropic.ContentBlockParamUnion
	if tr.Text != "" {
		blocks = append(blocks, anthropic.NewTextBlock(tr.Text))
	}
	blocks = append(blocks, anthropic.NewToolUseBlock(tr.Call.ID, toolInput(tr.Call.Arguments), tr.Call.Name))
	var want messages
	want.push(anthropic.NewAssistantMessage(blocks...))
	want.push(anthropic.NewUserMessage(anthropic.NewToolResultBlock(tr.Result.CallID, tr.Result.Content, tr.Result.IsError)))
	if want.err != nil {
		t.Fatalf("the SDK's params: %v", want.err)
	}
	if string(c.buf) != string(want.buf) {
		t.Fatalf("turn %+v:\n got %s\nwant %s", tr, c.buf, want.buf)
	}
}

// BenchmarkConversation is the rendering work of one step at 10, 100 and
// 1,000 steps of history: with the run's conversation cached (what the
// agent does), and rendered afresh from the steps (what it avoids).
func BenchmarkConversation(b *testing.B) {
	for _, provider := range []string{OpenAI, Anthropic} {
		for _, n := range []int{10, 100, 1000} {
			a, err := New(Config{Provider: provider, Model: "m", System: "s"})
			if err != nil {
				b.Fatal(err)
			}
			prev := driver.StepInput{Run: projector.Run{ID: "r", Input: json.RawMessage(`"go"`)}, Steps: history(n)}
			next := prev
			next.Steps = history(n + 1)
			b.Run(fmt.Sprintf("%s/history=%d/cached", provider, n), func(b *testing.B) {
				base := a.conversation(prev)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					a.convs.put("r", spare(base))
					b.StartTimer()
					a.conversation(next)
				}
			})
			b.Run(fmt.Sprintf("%s/history=%d/fresh", provider, n), func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					a.convs.take("r")
					a.conversation(next)
				}
			})
		}
	}
}

func msgsJSON(t *testing.T, c conversation) string {
	t.Helper()
	switch c := c.(type) {
	case *openAIConv:
		return string(c.buf)
	case *anthropicConv:
		return c.system + string(c.buf)
	}
	t.Fatalf("unknown conversation %T", c)
	return ""
}

// spare copies c with room for more messages, as a conversation that
// has grown by appends has.
func spare(c conversation) conversation {
	switch c := c.(type) {
	case *openAIConv:
		d := *c
		d.buf = append(make([]byte, 0, 2*len(c.buf)+4096), c.buf...)
		return &d
	case *anthropicConv:
		d := *c
		d.buf = append(make([]byte, 0, 2*len(c.buf)+4096), c.buf...)
		return &d
	}
	panic("unknown conversation")
}
