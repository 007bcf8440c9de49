package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// ErrChanged is the error of a call to a tool whose definition no longer
// matches its pin (the server changed it after the worker started): the
// call is refused, never sent.
var ErrChanged = errors.New("tool changed since pinned")

// ResultError is a result the server marked as an error: the tool ran and
// failed. Its message is the result as the model reads it.
type ResultError struct {
	Server, Tool string
	Text         string
}

func (e *ResultError) Error() string { return e.Text }

// Tool is one MCP tool offered to the driver.
type Tool struct {
	srv *server
	o   *offer
}

var _ driver.Tool = (*Tool)(nil)

// Spec returns the tool's spec: the server's description, its schema
// without fixed arguments, the class the operator gave it (tightened by its
// annotations), its pin and its fixed arguments.
func (t *Tool) Spec() driver.Spec {
	s := t.o.spec
	s.Schema = append(json.RawMessage(nil), s.Schema...)
	s.Fixed = append(json.RawMessage(nil), s.Fixed...)
	return s
}

// Execute calls the tool with args (checked against the model's schema)
// and the fixed arguments. A result the server marks as an error is a
// *[ResultError]; a tool whose definition changed since it was pinned is
// refused ([ErrChanged]), as is a call while the server is down
// ([ErrUnavailable]), a fixed argument set by the model
// ([ErrFixedArgument]) or arguments the server's whole schema refuses: none
// of these was sent. A call that was sent and got no answer (the call
// timeout passed, ctx ended, the server died or the connection broke) is
// an error wrapping [driver.ErrInterrupted]: whether it took effect is
// unknown.
func (t *Tool) Execute(ctx context.Context, args json.RawMessage) (string, error) {
	name := t.o.spec.Name
	now, ok := t.srv.current(t.o.remote)
	switch {
	case !ok:
		return "", fmt.Errorf("%s: %w: the server no longer lists it", name, ErrChanged)
	case now.pin.Hash != t.o.spec.Pin:
		return "", fmt.Errorf("%s: %w: %s", name, ErrChanged, changes(t.srv.pins[t.o.remote], now.pin))
	}
	merged, err := mergeFixed(args, t.o.fixed)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if t.o.full != nil {
		if _, err := t.o.full.CheckArgs(merged); err != nil {
			return "", fmt.Errorf("%s with its fixed arguments: %w", name, err)
		}
	}
	sess, err := t.srv.session()
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, t.o.timeout)
	defer cancel()
	res, err := sess.CallTool(cctx, &sdk.CallToolParams{Name: t.o.remote, Arguments: json.RawMessage(merged)})
	if err != nil {
		if refused(err) && cctx.Err() == nil {
			return "", fmt.Errorf("%s: the server refused the call: %w", name, err)
		}
		if cctx.Err() == nil {
			t.srv.broken(sess)
		}
		why := err
		if cctx.Err() != nil && ctx.Err() == nil {
			why = fmt.Errorf("no answer within %s: %w", t.o.timeout, err)
		}
		return "", fmt.Errorf("%s on mcp server %s: %w: %w", name, t.srv.cfg.Name, driver.ErrInterrupted, why)
	}
	text := render(res)
	if res.IsError {
		return "", &ResultError{Server: t.srv.cfg.Name, Tool: t.o.remote, Text: text}
	}
	return text, nil
}

// refused reports whether err is the server's own JSON-RPC error answer
// (it got the call and said no), as opposed to a broken connection. The SDK
// reports some failures of its own as JSON-RPC errors too: the client or
// server closing (-32003, -32004), and the transport failing to deliver the
// request (-32005, "rejected by transport": an HTTP POST that got no
// response, say), after which nobody can tell whether the server got it.
func refused(err error) bool {
	var we *jsonrpc.Error
	if errors.Is(err, sdk.ErrConnectionClosed) || !errors.As(err, &we) {
		return false
	}
	switch we.Code {
	case -32003, -32004, -32005:
		return false
	}
	return true
}
