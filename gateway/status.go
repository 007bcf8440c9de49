package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/gate"
	"github.com/arbiter-run/arbiter/projector"
)

// Status is what the status tool answers, as JSON.
type Status struct {
	// Run is the session's run ("" before its first call).
	Run    string `json:"run"`
	Status string `json:"status,omitempty"`
	Steps  int    `json:"steps"`
	// Waiting are the calls that wait for an operator (at most one: a run
	// waits on one approval at a time).
	Waiting []Waiting `json:"waiting"`
}

// Waiting is a call that waits for an operator.
type Waiting struct {
	Approval  string          `json:"approval"`
	Kind      string          `json:"kind"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	State     string          `json:"state"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
}

// status answers the status tool from the session's run, with what came
// for the approval it waits on taken in first (an operator's decision, an
// expiry passed: see [gate.Run.TakeIn]); it runs nothing. While a call of
// the session runs, it answers at once from what it has.
func (g *Gateway) status(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	run := g.session(req.Session).opened.Load()
	st := Status{Waiting: []Waiting{}}
	if run != nil {
		if err := run.TakeIn(ctx); err != nil {
			return failed(fmt.Errorf("arbiter could not read what operators decided on this session's run: %w", err)), nil
		}
		v, err := run.View()
		if errors.Is(err, gate.ErrUnreported) {
			st.Run, st.Status = run.ID(), "a call is running"
			return statusResult(st)
		}
		if err != nil {
			return failed(err), nil
		}
		st.Run, st.Status, st.Steps = v.Run.ID, string(v.Run.Status), v.Run.Steps
		if a := v.PendingApproval(); a != nil && v.Run.Status == projector.Waiting {
			st.Waiting = append(st.Waiting, Waiting{
				Approval: a.ID, Kind: a.Kind, Tool: a.Tool, Arguments: a.Args, State: string(a.State), ExpiresAt: a.ExpiresAt,
			})
		}
	}
	return statusResult(st)
}

func statusResult(st Status) (*sdk.CallToolResult, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return failed(err), nil
	}
	return text(string(b), false), nil
}
