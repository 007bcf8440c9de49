package rules

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// pos is a place in a rules file.
type pos struct{ line, col int }

// positions maps a JSON pointer into the document to where its value starts.
type positions map[string]pos

// at returns the position of ptr, or of its nearest ancestor that has one.
func (p positions) at(ptr string) pos {
	for {
		if q, ok := p[ptr]; ok {
			return q
		}
		i := strings.LastIndexByte(ptr, '/')
		if i < 0 {
			return pos{1, 1}
		}
		ptr = ptr[:i]
	}
}

// generic turns a YAML node into the value encoding/json would decode from
// the same document (map[string]any, []any, string, float64 or int64, bool,
// nil), recording where every value starts. It refuses what JSON cannot
// hold: anchors and aliases, non-string keys, tags other than the core ones.
func generic(n *yaml.Node, ptr string, ps positions) (any, error) {
	ps[ptr] = pos{n.Line, n.Column}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return nil, posErrorf(n.Line, n.Column, "want one document")
		}
		return generic(n.Content[0], ptr, ps)
	case yaml.AliasNode:
		return nil, posErrorf(n.Line, n.Column, "aliases are not accepted (write the value out)")
	case yaml.MappingNode:
		if n.Anchor != "" {
			return nil, posErrorf(n.Line, n.Column, "anchors are not accepted")
		}
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || (k.Tag != "!!str" && k.Tag != "!!merge") {
				return nil, posErrorf(k.Line, k.Column, "a key must be a string, not %s", strings.TrimPrefix(k.Tag, "!!"))
			}
			if k.Tag == "!!merge" {
				return nil, posErrorf(k.Line, k.Column, "merge keys (<<) are not accepted")
			}
			if _, dup := m[k.Value]; dup {
				return nil, posErrorf(k.Line, k.Column, "key %q repeated", k.Value)
			}
			val, err := generic(v, ptr+"/"+escapePointer(k.Value), ps)
			if err != nil {
				return nil, err
			}
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		if n.Anchor != "" {
			return nil, posErrorf(n.Line, n.Column, "anchors are not accepted")
		}
		s := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			v, err := generic(c, ptr+"/"+strconv.Itoa(i), ps)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
		}
		return s, nil
	case yaml.ScalarNode:
		return scalar(n)
	}
	return nil, posErrorf(n.Line, n.Column, "unexpected YAML node")
}

func scalar(n *yaml.Node) (any, error) {
	if n.Anchor != "" {
		return nil, posErrorf(n.Line, n.Column, "anchors are not accepted")
	}
	switch n.Tag {
	case "!!str":
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, posErrorf(n.Line, n.Column, "%v", err)
		}
		return b, nil
	case "!!int":
		var i int64
		if err := n.Decode(&i); err != nil {
			return nil, posErrorf(n.Line, n.Column, "integer %s: %v", n.Value, err)
		}
		return i, nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, posErrorf(n.Line, n.Column, "number %s: %v", n.Value, err)
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, posErrorf(n.Line, n.Column, "number %s is not a JSON number", n.Value)
		}
		return f, nil
	}
	return nil, posErrorf(n.Line, n.Column, "tag %s is not accepted", n.Tag)
}

// posError is a refusal of the YAML layer at a place in the file.
type posError struct {
	at     pos
	reason string
}

func (e *posError) Error() string { return fmt.Sprintf("%d:%d: %s", e.at.line, e.at.col, e.reason) }

func posErrorf(line, col int, format string, a ...any) error {
	return &posError{at: pos{line, col}, reason: fmt.Sprintf(format, a...)}
}

func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
