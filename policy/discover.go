package policy

import (
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/projector"
)

// Discoverer is an optional interface of a [Policy]: it says, before the
// agent asks for anything, which tools the agent is shown (the discovery
// phase). A tool it hides is left out of the tools the agent is given, and a
// request for it is refused like a request for a tool that does not exist.
// Visible must be pure, like Evaluate, and must not keep or change the view.
// [WithID] does not carry it: a Discoverer names itself.
type Discoverer interface {
	Visible(tool events.ToolSpec, view projector.View) bool
}

// Visible reports whether p shows tool: true unless p is a [Discoverer]
// that hides it.
func Visible(p Policy, tool events.ToolSpec, view projector.View) bool {
	d, ok := p.(Discoverer)
	return !ok || d.Visible(tool, view)
}

var _ Discoverer = (*Composed)(nil)

// Visible shows a tool only when every member shows it.
func (c *Composed) Visible(tool events.ToolSpec, view projector.View) bool {
	for _, m := range c.members {
		if !Visible(m, tool, view) {
			return false
		}
	}
	return true
}
