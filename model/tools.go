package model

import (
	"strings"
	"sync"

	"github.com/arbiter-run/arbiter/events"
)

// toolCache keeps the provider's form of the tool sets it was asked to
// offer, by the specs' hashes: a run's tools are the same at every step.
type toolCache[T any] struct {
	mu sync.Mutex
	m  map[string][]T
}

func (c *toolCache[T]) get(tools []events.ToolSpec, conv func(events.ToolSpec) T) []T {
	var key strings.Builder
	for _, t := range tools {
		key.WriteString(t.Hash)
		key.WriteString(t.Name)
		if t.Hash == "" {
			key.WriteString(t.Description)
			key.Write(t.Schema)
		}
		key.WriteByte(0)
	}
	k := key.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	if out, ok := c.m[k]; ok {
		return out
	}
	out := make([]T, len(tools))
	for i, t := range tools {
		out[i] = conv(t)
	}
	if c.m == nil || len(c.m) >= 64 {
		c.m = map[string][]T{}
	}
	c.m[k] = out
	return out
}
