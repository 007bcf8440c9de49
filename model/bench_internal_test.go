package model

import (
	"context"
	"fmt"
)

// SendBody sends body, a request's bytes, through a's own SDK client as
// its send does once the body is built (openAI.post), and reads the reply
// into the SDK's types; nothing is recorded. BenchmarkStep's floor for
// the SDK.
func (a *Agent) SendBody(ctx context.Context, body []byte) error {
	p, ok := a.p.(*openAI)
	if !ok {
		return fmt.Errorf("SendBody: provider %s, want %s", a.cfg.Provider, OpenAI)
	}
	res, err := p.post(ctx, body)
	if err != nil {
		return err
	}
	if len(res.Choices) != 1 || len(res.Choices[0].Message.ToolCalls) != 1 {
		return fmt.Errorf("SendBody: %d choices, want one with one tool call", len(res.Choices))
	}
	return nil
}
