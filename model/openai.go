package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/render"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"
)

// openAI speaks Chat Completions.
type openAI struct {
	cfg    *Config
	client openai.Client
	tools  toolCache
	fields []string // the request's fields before the messages, encoded once
}

func newOpenAI(cfg *Config) *openAI {
	opts := []option.RequestOption{option.WithMaxRetries(0), option.WithAPIKey(cfg.APIKey)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	fields := []string{field("model", cfg.Model), field("max_tokens", cfg.MaxTokens)}
	if cfg.Temperature != nil {
		fields = append(fields, field("temperature", *cfg.Temperature))
	}
	return &openAI{cfg: cfg, client: openai.NewClient(opts...), fields: fields}
}

type openAIConv struct{ messages }

func (p *openAI) start(system, input string) conversation {
	c := &openAIConv{}
	c.bytes = len(system) + len(input)
	if system != "" {
		c.push(openai.SystemMessage(system))
	}
	c.push(openai.UserMessage(input))
	return c
}

// add renders each turn as the assistant's message with its one tool
// call (and the text the model sent with it), then the call's result.
// Both are written by hand: the very bytes json.Marshal writes for the
// SDK's params (a ChatCompletionAssistantMessageParam with one function
// tool call, a ToolMessage), which TestOpenAITurn_SameAsSDK and
// FuzzOpenAITurn hold equal, at a fraction of the cost of the SDK's
// reflective encoder (a step's turn: 50 allocations and about 12 µs).
func (c *openAIConv) add(turns []render.Turn) {
	for _, t := range turns {
		c.buf = appendAssistant(c.next(), t)
		c.bytes += len(t.Text) + len(t.Call.ID) + len(t.Call.Name) + len(t.Call.Arguments)
		if t.Result != nil {
			c.buf = appendToolResult(c.next(), *t.Result)
			c.bytes += len(t.Result.Content)
		}
		c.turns++
	}
}

// appendAssistant appends the assistant's message for t's call.
func appendAssistant(b []byte, t render.Turn) []byte {
	b = append(b, '{')
	if t.Text != "" {
		b = appendString(append(b, `"content":`...), t.Text)
		b = append(b, ',')
	}
	b = appendString(append(b, `"tool_calls":[{"id":`...), t.Call.ID)
	b = appendString(append(b, `,"function":{"arguments":`...), t.Call.Arguments)
	b = appendString(append(b, `,"name":`...), t.Call.Name)
	return append(b, `},"type":"function"}],"role":"assistant"}`...)
}

// appendToolResult appends the tool message that answers a call.
func appendToolResult(b []byte, r render.ToolResult) []byte {
	b = appendString(append(b, `{"content":`...), r.Content)
	b = appendString(append(b, `,"tool_call_id":`...), r.CallID)
	return append(b, `,"role":"tool"}`...)
}

// send posts the request as its bytes: the messages encoded once each
// (see messages), the model, the limits and the tools. The SDK is handed
// the bytes as the request's body (option.WithRequestBody), its params
// left empty: params set from the bytes (param.SetJSON) would have it
// compact the whole body again at every call, work that grows with the
// history (780 µs for 178 KB).
func (p *openAI) send(ctx context.Context, conv conversation, tools []events.ToolSpec) (events.ModelReplyBody, error) {
	c := conv.(*openAIConv)
	if c.err != nil {
		return events.ModelReplyBody{}, fmt.Errorf("%w: messages: %w", errEncode, c.err)
	}
	ts, err := p.tools.get(tools, openAITool)
	if err != nil {
		return events.ModelReplyBody{}, fmt.Errorf("%w: tools: %w", errEncode, err)
	}
	res, err := p.post(ctx, request("messages", &c.messages, ts, p.fields...))
	if err != nil {
		return events.ModelReplyBody{}, err
	}
	return openAIReply(res), nil
}

// post sends body through the SDK and reads the reply into its types.
func (p *openAI) post(ctx context.Context, body []byte) (*openai.ChatCompletion, error) {
	return p.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{}, option.WithRequestBody("application/json", body))
}

// openAITool offers a tool as a function, its schema's bytes as they are.
func openAITool(t events.ToolSpec) any {
	def := struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	}{t.Name, t.Description, t.Schema}
	b, _ := json.Marshal(def) // a name, a description and a stored schema always encode
	return openai.ChatCompletionFunctionTool(param.Override[shared.FunctionDefinitionParam](json.RawMessage(b)))
}

// openAIReply reads the first choice: its text, refusal and tool calls,
// each call's arguments exactly the string the model sent.
func openAIReply(res *openai.ChatCompletion) events.ModelReplyBody {
	r := events.ModelReplyBody{
		Usage:    events.ModelUsage{InputTokens: res.Usage.PromptTokens, OutputTokens: res.Usage.CompletionTokens},
		Response: res.RawJSON(),
	}
	if len(res.Choices) == 0 {
		r.Finish = "no_choices"
		return r
	}
	ch := res.Choices[0]
	r.Finish, r.Text, r.Refusal = ch.FinishReason, ch.Message.Content, ch.Message.Refusal
	if r.Finish == "content_filter" && r.Refusal == "" {
		r.Refusal = "the provider's content filter stopped the reply"
	}
	for _, tc := range ch.Message.ToolCalls {
		r.ToolCalls = append(r.ToolCalls, events.ModelToolCall{ID: tc.ID, Name: tc.Function.Name, Args: tc.Function.Arguments})
	}
	return r
}

func (p *openAI) classify(err error) failure {
	var ae *openai.Error
	if errors.As(err, &ae) {
		msg := ae.Message
		if msg == "" {
			msg = strings.TrimSpace(ae.RawJSON())
		}
		if msg == "" {
			msg = ae.Error()
		}
		var h = ae.Response
		if h == nil {
			return httpFailure(ae.StatusCode, nil, msg)
		}
		return httpFailure(ae.StatusCode, h.Header, msg)
	}
	return transportFailure(err)
}
