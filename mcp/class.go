package mcp

import (
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/events"
)

// classRank is class's place in [events.SideEffects] (from the least to
// the most strict), -1 for an unknown class.
func classRank(class events.SideEffect) int {
	for i, c := range events.SideEffects {
		if c == class {
			return i
		}
	}
	return -1
}

// stricter returns the stricter of two known classes.
func stricter(a, b events.SideEffect) events.SideEffect {
	if classRank(b) > classRank(a) {
		return b
	}
	return a
}

// hintedClass is the least class a tool's annotations admit, "" when it
// has none. Only hints the server states count: a tool that does not claim
// to be read-only modifies something (local_mutation at least), an
// explicit open-world hint makes that remote, an explicit destructive hint
// destructive. A read-only claim is the weakest and so never loosens
// anything.
func hintedClass(a *sdk.ToolAnnotations) events.SideEffect {
	switch {
	case a == nil:
		return ""
	case a.ReadOnlyHint:
		return events.ReadOnly
	case a.DestructiveHint != nil && *a.DestructiveHint:
		return events.Destructive
	case a.OpenWorldHint != nil && *a.OpenWorldHint:
		return events.RemoteMutation
	}
	return events.LocalMutation
}
