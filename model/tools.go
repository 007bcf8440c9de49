package model

import (
	"encoding/json"
	"strings"
	"sync"

	"github.com/arbiter-run/arbiter/events"
)

// toolCache keeps the encoded JSON array of the tool sets it was asked to
// offer, by the specs' hashes: a run's tools are the same at every step.
type toolCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

// get returns tools as a JSON array of what conv makes of each.
func (c *toolCache) get(tools []events.ToolSpec, conv func(events.ToolSpec) any) ([]byte, error) {
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
		return out, nil
	}
	params := make([]any, len(tools))
	for i, t := range tools {
		params[i] = conv(t)
	}
	out, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	if c.m == nil || len(c.m) >= 64 {
		c.m = map[string][]byte{}
	}
	c.m[k] = out
	return out, nil
}
