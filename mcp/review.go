package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
)

// Status is how a tool a server lists stands against the lock file.
type Status string

// The statuses of a reviewed tool. Only a pinned tool is ever offered.
const (
	Pinned   Status = "pinned"   // hashes to its pin
	Changed  Status = "changed"  // pinned, but its definition differs now
	New      Status = "new"      // not in the lock
	Renamed  Status = "renamed"  // not in the lock; defined as a pinned tool the server no longer lists
	Missing  Status = "missing"  // pinned, no longer listed
	Unusable Status = "unusable" // its definition cannot be pinned or offered (see Note)
)

// Review is what the package makes of one tool of one server: whether it
// matches its pin, the class it is offered under, and why not when it is
// not.
type Review struct {
	Server string
	// Tool is the server's name for it; Name the name it is offered as.
	Tool, Name string
	Status     Status
	// Change says what differs from the pin (Changed: "description, input
	// schema"; Renamed: "renamed from X").
	Change string
	// Class is the side-effect class it is, or would be, offered under;
	// empty when the operator did not classify it.
	Class   events.SideEffect
	Offered bool
	// Hint says what the server's annotations did to the operator's class.
	Hint string
	// Note says why it is not offered.
	Note string
}

// notable reports whether r is worth telling an operator about: a tool
// that is not as pinned, or whose hints disagree with the operator. A
// pinned tool the config does not list is hidden as the operator chose.
func (r Review) notable() bool { return r.Status != Pinned || r.Hint != "" }

// offer is a tool to offer: its recorded spec and how to call it.
type offer struct {
	remote  string
	spec    driver.Spec
	timeout time.Duration
	fixed   []byte
	// full checks the arguments as the server gets them (fixed ones
	// included) against the server's whole schema; nil without fixed
	// arguments.
	full *driver.CompiledTool
}

// callGrace is how much longer a tool's spec timeout is than its call
// timeout, so the call's own deadline (an interrupted call) is what ends it,
// not the driver's (a plain timeout).
const callGrace = time.Second

// reviewServer compares what a server lists with its pins and its config.
// It is pure: the same inputs give the same reviews, sorted by tool.
func reviewServer(cfg ServerConfig, pins map[string]Pin, listing map[string]listed) ([]Review, map[string]*offer) {
	offers := map[string]*offer{}
	var out []Review
	gone := map[string]Pin{}
	for name, p := range pins {
		if _, ok := listing[name]; !ok {
			gone[name] = p
		}
	}
	for _, name := range sortedKeys(listing) {
		l := listing[name]
		r := Review{Server: cfg.Name, Tool: name, Name: cfg.Name + "__" + name}
		r.Class, r.Hint = classify(cfg, name, l)
		pinned, ok := pins[name]
		switch {
		case l.err != nil:
			r.Status, r.Note = Unusable, l.err.Error()
		case !ok:
			r.Status, r.Note = New, "not pinned (run arbiter mcp pin after review)"
			for _, old := range sortedKeys(gone) {
				g := gone[old]
				if g.Description == l.pin.Description && g.Schema == l.pin.Schema && g.Annotations == l.pin.Annotations {
					r.Status, r.Change = Renamed, "renamed from "+old
					break
				}
			}
		case pinned.Hash != l.pin.Hash:
			r.Status, r.Change, r.Note = Changed, changes(pinned, l.pin)+" changed since pinned", "refused until pinned again"
		default:
			r.Status = Pinned
		}
		if r.Status == Pinned && r.Class == "" {
			r.Note = "not listed in the config"
		}
		if r.Status == Pinned && r.Class != "" {
			o, err := newOffer(cfg, name, r, l)
			if err != nil {
				r.Status, r.Note = Unusable, err.Error()
			} else {
				offers[name] = o
				r.Offered = true
			}
		}
		out = append(out, r)
	}
	for _, name := range sortedKeys(gone) {
		out = append(out, Review{Server: cfg.Name, Tool: name, Name: cfg.Name + "__" + name, Status: Missing, Note: "pinned but no longer listed by the server"})
	}
	slices.SortStableFunc(out, func(a, b Review) int {
		switch {
		case a.Tool < b.Tool:
			return -1
		case a.Tool > b.Tool:
			return 1
		}
		return 0
	})
	return out, offers
}

// classify is the class tool is offered under: the operator's (the tool's,
// else the server's default; destructive for an unlisted tool when the
// config says so), made stricter by the annotations, never looser.
func classify(cfg ServerConfig, tool string, l listed) (class events.SideEffect, hint string) {
	tc, ok := cfg.Tools[tool]
	switch {
	case ok && tc.Class != "":
		class = tc.Class
	case ok:
		class = cfg.Class
	case cfg.Unlisted == UnlistedStrictest:
		class = events.Destructive
	default:
		return "", ""
	}
	if l.tool == nil {
		return class, ""
	}
	h := hintedClass(l.tool.Annotations)
	switch {
	case h == "" || h == class:
	case classRank(h) > classRank(class):
		hint = fmt.Sprintf("annotations tighten %s to %s", class, h)
		class = h
	default:
		hint = fmt.Sprintf("annotations claim %s; the operator's %s stands", h, class)
	}
	return class, hint
}

// newOffer builds the spec of a pinned, classified tool: its schema
// self-contained, the fixed arguments hidden from it, all of it compiled as
// the driver will.
func newOffer(cfg ServerConfig, name string, r Review, l listed) (*offer, error) {
	schema, err := toolSchema(l.tool)
	if err != nil {
		return nil, err
	}
	if err := selfContained(schema); err != nil {
		return nil, err
	}
	tc := cfg.Tools[name]
	fixed, err := tc.fixedJSON()
	if err != nil {
		return nil, fmt.Errorf("fixed: %w", err)
	}
	model, err := modelSchema(schema, fixed)
	if err != nil {
		return nil, err
	}
	timeout, err := cfg.timeout(name)
	if err != nil {
		return nil, err
	}
	o := &offer{remote: name, timeout: timeout, fixed: fixed, spec: driver.Spec{
		Name: r.Name, Description: l.tool.Description, Schema: json.RawMessage(model),
		SideEffect: r.Class, Timeout: timeout + callGrace, Pin: l.pin.Hash, Fixed: fixed,
	}}
	if _, err := driver.Compile(specTool{o.spec}); err != nil {
		return nil, err
	}
	if len(fixed) > 0 {
		full := o.spec
		full.Schema, full.Fixed = schema, nil
		if o.full, err = driver.Compile(specTool{full}); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// specTool is a spec with no code, for compiling.
type specTool struct{ s driver.Spec }

func (t specTool) Spec() driver.Spec { return t.s }
func (specTool) Execute(context.Context, json.RawMessage) (string, error) {
	return "", errors.New("not callable")
}
