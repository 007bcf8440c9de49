package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/projector"
)

// handler is the host's call of tool: asked of the gate, run upstream when
// allowed, answered with what the run recorded.
func (g *Gateway) handler(tool string) sdk.ToolHandler {
	// The upstream call runs inside the gate's call, on the handler's
	// goroutine, once its write-ahead allow is stored, with the arguments
	// the gate allowed. Taken once here, not a method value a call.
	upstream := g.tools[tool].Execute
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		args := req.Params.Arguments
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		s := g.session(req.Session)
		s.mu.Lock()
		defer s.mu.Unlock()
		run, err := g.open(ctx, s)
		if err != nil {
			return failed(fmt.Errorf("arbiter could not open this session's run: %w", err)), nil
		}
		a, err := g.call(ctx, run, tool, args, upstream)
		switch {
		case err != nil && a.Ran && logAway(err):
			return failed(fmt.Errorf("arbiter: the call ran, and its effect has taken place, but its result could not be recorded yet: "+
				"arbiter's event log is unreachable (%w). The result is kept, and recorded once the log is back while this gateway runs; do not make the call again to get it", err)), nil
		case err != nil && a.Ran:
			return failed(fmt.Errorf("arbiter could not record the result: %w", err)), nil
		case err != nil:
			return g.refusal(run.ID(), err), nil
		case a.Verdict == gate.Pending:
			return waiting(run.ID(), a), nil
		}
		return observed(a.Observation), nil
	}
}

// call calls through the gate, and while the answer is pending (before the
// call ran) calls again, every Poll up to Wait: each call takes in a
// decision an operator published.
func (g *Gateway) call(ctx context.Context, run *gate.Run, tool string, args json.RawMessage, fn func(context.Context, json.RawMessage) (string, error)) (gate.Answer, error) {
	var deadline time.Time // read the clock only for a call that waits
	for {
		a, err := run.Call(ctx, tool, args, fn)
		if err != nil || a.Verdict != gate.Pending || a.Ran {
			return a, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(g.cfg.Wait)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return a, nil
		}
		t := time.NewTimer(min(left, g.cfg.Poll))
		select {
		case <-ctx.Done():
			t.Stop()
			return a, nil
		case <-t.C:
		}
	}
}

func text(s string, isError bool) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}, IsError: isError}
}

func failed(err error) *sdk.CallToolResult { return text(err.Error(), true) }

// observed answers with the step's observation: a result as the upstream
// server gave it, anything else (a denial, refused arguments, a tool error)
// as an error result the model reads.
func observed(o *events.ObservedBody) *sdk.CallToolResult {
	if o.Kind == events.ObsResult {
		return text(o.Content, false)
	}
	return text(fmt.Sprintf("arbiter: not done (%s): %s", o.Kind, o.Content), true)
}

// waiting answers a call that waits for an operator. It is not an error:
// retrying it changes nothing until the operator decides.
func waiting(run string, a gate.Answer) *sdk.CallToolResult {
	ap := a.Approval
	msg := fmt.Sprintf("WAITING FOR APPROVAL: this call has not run. It waits for an operator to decide approval %s (run %s, %s). "+
		"Do not retry it now; tell the user it waits. Once the operator has granted it, make exactly the same call again and it runs once; "+
		"a different call runs nothing while this one waits. Call %s to see what waits.", ap.ID, run, ap.Reason, StatusTool)
	if ap.ExpiresAt != nil {
		msg += " The approval expires at " + ap.ExpiresAt.UTC().Format(time.RFC3339) + "."
	}
	return text(msg, false)
}

// refusal answers a call the gate did not take: the session waits on
// another call's approval, or its run has ended.
func (g *Gateway) refusal(run string, err error) *sdk.CallToolResult {
	var w *gate.WaitingError
	if errors.As(err, &w) {
		if w.Approval.State == projector.Granted {
			return text(fmt.Sprintf("NOT RUN: an operator granted approval %s, for a call to %s with %s, and nothing else runs before it. "+
				"To run it, make exactly that call again; it runs once. Call %s to see what waits.",
				w.Approval.ID, w.Approval.Tool, w.Approval.Args, StatusTool), false)
		}
		return text(fmt.Sprintf("NOT RUN: this session waits for an operator to decide approval %s, for a call to %s with %s. "+
			"Nothing else runs until the operator has decided it: once granted, that same call runs when made again; "+
			"denied or expired, the session's run ends. Call %s to see what waits.",
			w.Approval.ID, w.Approval.Tool, w.Approval.Args, StatusTool), false)
	}
	if logAway(err) {
		return text(fmt.Sprintf("NOT RUN: arbiter's event log is unreachable, so this call was not run (%v). "+
			"Tell the user Arbiter's server is away; the same call may be made again once it is back.", err), true)
	}
	var e *gate.EndedError
	if errors.As(err, &e) {
		return text(fmt.Sprintf("arbiter: this session's run %s has ended (%s, %s%s); no call runs in it any more. %s",
			run, e.Status, e.Reason, detail(e.Detail), g.afterEnd(run)), true)
	}
	return failed(fmt.Errorf("arbiter: %w", err))
}

// afterEnd says what to do once run has ended: start a new session, or,
// for the run the gateway is configured to carry on, which every new
// session of a restarted gateway takes again, configure another.
func (g *Gateway) afterEnd(run string) string {
	if g.cfg.Run != "" && run == g.cfg.Run {
		return fmt.Sprintf("It is the run this gateway is configured to carry on (arbiter gateway --run %s), so a new session takes it again: "+
			"the gateway needs another run id, or none for a new run each session, before calls run again.", run)
	}
	return "Start a new session."
}

// logAway reports whether err says the event log (the NATS server) could
// not be reached, rather than refusing the call.
func logAway(err error) bool {
	for _, away := range []error{nats.ErrTimeout, nats.ErrReconnectBufExceeded, nats.ErrConnectionReconnecting,
		nats.ErrConnectionClosed, nats.ErrDisconnected, nats.ErrNoResponders, nats.ErrNoServers} {
		if errors.Is(err, away) {
			return true
		}
	}
	return false
}

func detail(d string) string {
	if d == "" {
		return ""
	}
	return ": " + d
}
