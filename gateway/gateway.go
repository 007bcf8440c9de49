package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/gate"
)

// Config builds a [Gateway]. Zero values are documented per field.
type Config struct {
	// Gate is the gate's configuration; its Tools are filled in from Tools
	// and must be left empty.
	Gate gate.Config
	// Tools are the upstream tools offered to the host (an [mcp.Set]'s
	// tools): each is listed under its name with its model schema, and run
	// with the arguments the gate allowed. At least one. A tool that
	// Gate.Withheld names (mcp.Set.Withheld: changed upstream since it was
	// pinned) is left out of every listing while it is named, and a call
	// to it is recorded and refused as an unknown tool; see
	// [Gateway.ToolsChanged].
	Tools []driver.Tool
	// Wait is how long a call that needs an operator waits for the
	// decision before it answers that it waits. Default 10s; negative:
	// answer at once.
	Wait time.Duration
	// Poll is how often a waiting call looks for the decision. Default
	// 250ms.
	Poll time.Duration
	// Actor is recorded as the agent of each session's run. Default
	// "gateway".
	Actor string
	// Run, when set, is the id of the run of the first session: it is
	// resumed if it exists (a desktop host restarted carries on its run),
	// created otherwise. A run that exists but is not a gate run, or was
	// opened for another actor, is refused, and every call of the session
	// fails saying so until it can be opened. Later sessions, and every
	// session when Run is empty, get a new run.
	Run string
	// Logger; default discards.
	Logger *slog.Logger
}

// StatusTool is the name of the gateway's own read-only tool; it never
// clashes with an upstream tool, whose names hold "__".
const StatusTool = "arbiter_status"

// ErrConfig marks a configuration the gateway refuses.
var ErrConfig = errors.New("gateway config")

// Gateway is the MCP server in front of the upstream tools.
type Gateway struct {
	cfg   Config
	gate  *gate.Gate
	tools map[string]driver.Tool
	specs []driver.Spec

	mu       sync.Mutex
	sessions map[*sdk.ServerSession]*session
	first    bool          // the first session has taken Config.Run
	servers  []*sdk.Server // made by Server, told of ToolsChanged
}

// New checks cfg and builds a gateway: a tool the driver refuses, or whose
// schema is not an object schema (MCP requires one), is an error naming it.
func New(cfg Config) (*Gateway, error) {
	if len(cfg.Tools) == 0 {
		return nil, fmt.Errorf("%w: no tools", ErrConfig)
	}
	if len(cfg.Gate.Tools) > 0 {
		return nil, fmt.Errorf("%w: Gate.Tools is filled in from Tools; leave it empty", ErrConfig)
	}
	if cfg.Wait == 0 {
		cfg.Wait = 10 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	if cfg.Actor == "" {
		cfg.Actor = "gateway"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, tools: map[string]driver.Tool{}, sessions: map[*sdk.ServerSession]*session{}}
	for _, t := range cfg.Tools {
		s := t.Spec()
		var probe struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(s.Schema, &probe); err != nil || probe.Type != "object" {
			return nil, fmt.Errorf("%w: tool %q: input schema is not an object schema (MCP requires \"type\": \"object\")", ErrConfig, s.Name)
		}
		if s.Name == StatusTool {
			return nil, fmt.Errorf("%w: tool %q: the name is the gateway's own", ErrConfig, s.Name)
		}
		g.tools[s.Name] = t
		g.specs = append(g.specs, s)
	}
	gc := cfg.Gate
	gc.Tools = g.specs
	gt, err := gate.New(gc)
	if err != nil {
		return nil, fmt.Errorf("new gateway: %w", err)
	}
	g.gate = gt
	return g, nil
}

// Gate returns the gate the gateway asks.
func (g *Gateway) Gate() *gate.Gate { return g.gate }

// Server returns an MCP server offering the upstream tools and the status
// tool. Serve it on any transport ([sdk.StdioTransport], or [Gateway.HTTP]);
// each session it serves gets a run of its own.
func (g *Gateway) Server() *sdk.Server {
	srv := sdk.NewServer(&sdk.Implementation{Name: "arbiter-gateway", Version: "1"}, nil)
	for _, s := range g.specs {
		srv.AddTool(listing(s), g.handler(s.Name))
	}
	srv.AddTool(statusTool(), g.status)
	srv.AddReceivingMiddleware(g.unlistWithheld)
	g.mu.Lock()
	g.servers = append(g.servers, srv)
	g.mu.Unlock()
	return srv
}

func statusTool() *sdk.Tool {
	return &sdk.Tool{
		Name:        StatusTool,
		Description: "Arbiter: which of this session's tool calls wait for an operator's approval. Read-only; records nothing.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`),
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}
}

// unlistWithheld leaves out of every tools/list answer the tools
// Gate.Withheld names as it answers: a tool that changed upstream since it
// was pinned is not shown to the host. It stays registered, so that a host
// that calls it anyway (from a list it kept) has the call recorded and
// refused by the gate, as a worker's run records and refuses it.
func (g *Gateway) unlistWithheld(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		res, err := next(ctx, method, req)
		lr, ok := res.(*sdk.ListToolsResult)
		if err != nil || !ok || method != "tools/list" || g.cfg.Gate.Withheld == nil {
			return res, err
		}
		withheld := g.cfg.Gate.Withheld()
		if len(withheld) == 0 {
			return res, nil
		}
		kept := make([]*sdk.Tool, 0, len(lr.Tools))
		for _, t := range lr.Tools {
			if !slices.ContainsFunc(withheld, func(w events.WithheldTool) bool { return w.Name == t.Name }) {
				kept = append(kept, t)
			}
		}
		out := *lr
		out.Tools = kept
		return &out, nil
	}
}

// ToolsChanged tells every host connected to a server of this gateway
// that its tool list changed (an MCP notifications/tools/list_changed),
// so that it lists the tools again: call it when what Gate.Withheld says
// may have changed (from mcp.Options.OnChange, as arbiter gateway does).
// Listings are right without it; a host that is not told keeps the list
// it has, and a call to a tool withheld since is refused.
func (g *Gateway) ToolsChanged() {
	g.mu.Lock()
	servers := slices.Clone(g.servers)
	g.mu.Unlock()
	for _, srv := range servers {
		// Registering a tool again under its name replaces it, and the
		// server notifies every session (after a short delay that
		// gathers changes).
		srv.AddTool(statusTool(), g.status)
	}
}

// listing is how a tool is shown to the host: its model schema (fixed
// arguments removed) and hints that say its class, the operator's.
func listing(s driver.Spec) *sdk.Tool {
	no := false
	yes := true
	ann := &sdk.ToolAnnotations{ReadOnlyHint: s.SideEffect == events.ReadOnly, OpenWorldHint: &no}
	switch s.SideEffect {
	case events.Destructive:
		ann.DestructiveHint = &yes
	case events.RemoteMutation:
		ann.OpenWorldHint = &yes
		ann.DestructiveHint = &no
	case events.LocalMutation:
		ann.DestructiveHint = &no
	}
	return &sdk.Tool{Name: s.Name, Description: s.Description, InputSchema: json.RawMessage(bytes.Clone(s.Schema)), Annotations: ann}
}

// session is one host session and its run.
type session struct {
	mu  sync.Mutex // one call at a time: a run decides one step at a time
	run *gate.Run  // under mu
	// opened is run once it is opened, for the status tool, which must
	// answer while a call waits.
	opened atomic.Pointer[gate.Run]
}

func (g *Gateway) session(ss *sdk.ServerSession) *session {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.sessions[ss]
	if s == nil {
		s = &session{}
		g.sessions[ss] = s
		if ss != nil {
			go func() {
				_ = ss.Wait()
				g.mu.Lock()
				delete(g.sessions, ss)
				g.mu.Unlock()
				s.mu.Lock()
				if s.run != nil {
					s.run.Close()
				}
				s.mu.Unlock()
			}()
		}
	}
	return s
}

// sameActor refuses to carry on run r for actor when another actor opened
// it: its calls would be judged as that actor's, not the configured one's.
func sameActor(r *gate.Run, actor string) error {
	v, err := r.View()
	if err != nil {
		r.Close()
		return err
	}
	if want := gate.AgentPrefix + actor; v.Run.Agent != want {
		r.Close()
		return fmt.Errorf("run %s was opened as %q, and this gateway's actor is %q (%s): give the gateway that actor, or another run", r.ID(), v.Run.Agent, actor, want)
	}
	return nil
}

// open returns the session's run, opening it on the first call.
func (g *Gateway) open(ctx context.Context, s *session) (*gate.Run, error) {
	if s.run != nil {
		return s.run, nil
	}
	g.mu.Lock()
	id := events.NewID()
	named := !g.first && g.cfg.Run != ""
	if named {
		id = g.cfg.Run
	}
	g.first = true
	g.mu.Unlock()
	var (
		r   *gate.Run
		err error
	)
	if named {
		r, err = g.gate.Resume(ctx, id)
		if errors.Is(err, events.ErrNoRun) {
			r, err = g.gate.Open(ctx, id, g.cfg.Actor, nil)
		} else if err == nil {
			err = sameActor(r, g.cfg.Actor)
		}
	} else {
		r, err = g.gate.Open(ctx, id, g.cfg.Actor, nil)
	}
	if err != nil {
		if named {
			// The next call asks for the configured run again, rather
			// than opening another.
			g.mu.Lock()
			g.first = false
			g.mu.Unlock()
		}
		return nil, err
	}
	s.run = r
	s.opened.Store(r)
	g.cfg.Logger.Info("session run opened", "run", id)
	return r, nil
}
