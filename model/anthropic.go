package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/render"
)

// anthropicMessages speaks Anthropic's Messages.
type anthropicMessages struct {
	cfg    *Config
	client anthropic.Client
	tools  toolCache
	// The request's fields around the system prompt, encoded once.
	model, maxTokens, temperature string
}

func newAnthropic(cfg *Config) *anthropicMessages {
	// The agent resolves its own key; the SDK must not pick one up from
	// the environment.
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithMaxRetries(0), option.WithAPIKey(cfg.APIKey)}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	p := &anthropicMessages{cfg: cfg, client: anthropic.NewClient(opts...), model: field("model", cfg.Model), maxTokens: field("max_tokens", cfg.MaxTokens)}
	if cfg.Temperature != nil {
		p.temperature = field("temperature", *cfg.Temperature)
	}
	return p
}

type anthropicConv struct {
	messages
	system string // the system field, encoded; "" for none
}

func (p *anthropicMessages) start(system, input string) conversation {
	c := &anthropicConv{}
	c.bytes = len(system) + len(input)
	if system != "" {
		c.system = field("system", []anthropic.TextBlockParam{{Text: system}})
	}
	c.push(anthropic.NewUserMessage(anthropic.NewTextBlock(input)))
	return c
}

// add renders each turn as the assistant's message with its text and one
// tool_use, then a user message with the tool_result. Both are written by
// hand, the very bytes json.Marshal writes for the SDK's params
// (NewAssistantMessage of a text block and NewToolUseBlock,
// NewUserMessage of NewToolResultBlock), which
// TestAnthropicTurn_SameAsSDK and FuzzAnthropicTurn hold equal.
func (c *anthropicConv) add(turns []render.Turn) {
	for _, t := range turns {
		c.buf = appendToolUse(c.next(), t)
		c.bytes += len(t.Text) + len(t.Call.ID) + len(t.Call.Name) + len(t.Call.Arguments)
		if t.Result != nil {
			c.buf = appendToolResultBlock(c.next(), *t.Result)
			c.bytes += len(t.Result.Content)
		}
		c.turns++
	}
}

// appendToolUse appends the assistant's message for t's call.
func appendToolUse(b []byte, t render.Turn) []byte {
	b = append(b, `{"content":[`...)
	if t.Text != "" {
		b = appendString(append(b, `{"text":`...), t.Text)
		b = append(b, `,"type":"text"},`...)
	}
	b = appendString(append(b, `{"id":`...), t.Call.ID)
	b = appendRaw(append(b, `,"input":`...), toolInput(t.Call.Arguments))
	b = appendString(append(b, `,"name":`...), t.Call.Name)
	return append(b, `,"type":"tool_use"}],"role":"assistant"}`...)
}

// appendToolResultBlock appends the user message that answers a call.
func appendToolResultBlock(b []byte, r render.ToolResult) []byte {
	b = appendString(append(b, `{"content":[{"tool_use_id":`...), r.CallID)
	b = strconv.AppendBool(append(b, `,"is_error":`...), r.IsError)
	b = appendString(append(b, `,"content":[{"text":`...), r.Content)
	return append(b, `,"type":"text"}],"type":"tool_result"}],"role":"user"}`...)
}

// toolInput is a call's arguments as a tool_use input: the model's bytes
// when they are a JSON object. Messages takes nothing else there (a reply
// can hold only an object), so bytes that are not one go back as {}; the
// tool_result that follows says what was wrong with them.
func toolInput(args string) json.RawMessage {
	b := []byte(args)
	if json.Valid(b) && strings.HasPrefix(strings.TrimSpace(args), "{") {
		return b
	}
	return json.RawMessage(`{}`)
}

// send posts the request as its bytes (see messages), handed to the SDK
// as the body (see openAI's send).
func (p *anthropicMessages) send(ctx context.Context, conv conversation, tools []events.ToolSpec) (events.ModelReplyBody, error) {
	c := conv.(*anthropicConv)
	if c.err != nil {
		return events.ModelReplyBody{}, fmt.Errorf("%w: messages: %w", errEncode, c.err)
	}
	ts, err := p.tools.get(tools, anthropicTool)
	if err != nil {
		return events.ModelReplyBody{}, fmt.Errorf("%w: tools: %w", errEncode, err)
	}
	fields := []string{p.model, p.maxTokens}
	if c.system != "" {
		fields = append(fields, c.system)
	}
	if p.temperature != "" {
		fields = append(fields, p.temperature)
	}
	body := request("messages", &c.messages, ts, fields...)
	res, err := p.client.Messages.New(ctx, anthropic.MessageNewParams{}, option.WithRequestBody("application/json", body))
	if err != nil {
		return events.ModelReplyBody{}, err
	}
	return anthropicReply(res), nil
}

// anthropicTool offers a tool, its schema's bytes as they are.
func anthropicTool(t events.ToolSpec) any {
	tp := &anthropic.ToolParam{Name: t.Name, InputSchema: param.Override[anthropic.ToolInputSchemaParam](t.Schema)}
	if t.Description != "" {
		tp.Description = anthropic.String(t.Description)
	}
	return anthropic.ToolUnionParam{OfTool: tp}
}

// anthropicCut is the stop reason of a reply the token limit cut.
const anthropicCut = anthropic.StopReasonMaxTokens

// anthropicReply reads the content blocks: text, and tool_use inputs as
// the bytes they have in the reply's body.
func anthropicReply(res *anthropic.Message) events.ModelReplyBody {
	r := events.ModelReplyBody{
		Finish:   string(res.StopReason),
		Usage:    events.ModelUsage{InputTokens: res.Usage.InputTokens, OutputTokens: res.Usage.OutputTokens},
		Response: res.RawJSON(),
	}
	var text strings.Builder
	for _, b := range res.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			r.ToolCalls = append(r.ToolCalls, events.ModelToolCall{ID: b.ID, Name: b.Name, Args: string(b.Input)})
		}
	}
	r.Text = text.String()
	if res.StopReason == anthropic.StopReasonRefusal {
		r.Refusal = r.Text
		if r.Refusal == "" {
			r.Refusal = "the model declined to answer"
		}
	}
	return r
}

func (p *anthropicMessages) classify(err error) failure {
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		msg := ae.Message
		if msg == "" {
			msg = strings.TrimSpace(ae.RawJSON())
		}
		if msg == "" {
			msg = ae.Error()
		}
		if ae.Response == nil {
			return httpFailure(ae.StatusCode, nil, msg)
		}
		return httpFailure(ae.StatusCode, ae.Response.Header, msg)
	}
	return transportFailure(err)
}
