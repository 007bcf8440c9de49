package rules

import "strings"

// glob is a compiled pattern: '*' matches any run of characters (none
// included), every other character itself.
type glob struct {
	src   string
	parts []string // the literal parts between stars
	star  bool     // any star at all
}

func compileGlob(p string) glob {
	g := glob{src: p}
	if strings.IndexByte(p, '*') < 0 {
		return g
	}
	g.star = true
	g.parts = strings.Split(p, "*")
	return g
}

// all reports whether g matches every string.
func (g glob) all() bool {
	if !g.star {
		return false
	}
	for _, p := range g.parts {
		if p != "" {
			return false
		}
	}
	return true
}

func (g glob) match(s string) bool {
	if !g.star {
		return s == g.src
	}
	first, last := g.parts[0], g.parts[len(g.parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, p := range g.parts[1 : len(g.parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}
