package testkit

import (
	"encoding/json"
	"maps"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// mergeSchemas is a best-effort conjunction of two schemas: properties and
// required are united, types intersected, bounds tightened, additionalProperties
// false wins, a second oneOf or anyOf is kept inside allOf, and any other
// keyword of b replaces a's.
func mergeSchemas(a, b any) any {
	if ab, ok := a.(bool); ok {
		if !ab {
			return false
		}
		return b
	}
	if bb, ok := b.(bool); ok {
		if !bb {
			return false
		}
		return a
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if !aok || !bok {
		return b
	}
	out := maps.Clone(am)
	for _, k := range sortedKeys(bm) {
		bv := bm[k]
		av, had := out[k]
		if !had {
			out[k] = bv
			continue
		}
		switch k {
		case "properties":
			out[k] = mergeProperties(av, bv)
		case "required":
			out[k] = unionStrings(av, bv)
		case "type":
			out[k] = intersectTypes(av, bv)
		case "allOf":
			out[k] = append(slices.Clip(asList(av)), asList(bv)...)
		case "oneOf", "anyOf":
			out["allOf"] = append(slices.Clip(asList(out["allOf"])), map[string]any{k: bv})
		case "additionalProperties":
			if bv == false {
				out[k] = false
			} else if av != false {
				out[k] = mergeSchemas(av, bv)
			}
		case "minimum", "minLength", "minItems", "minProperties":
			out[k] = numExtreme(av, bv, 1)
		case "maximum", "maxLength", "maxItems", "maxProperties":
			out[k] = numExtreme(av, bv, -1)
		default:
			out[k] = bv
		}
	}
	return out
}

func mergeProperties(a, b any) any {
	am, _ := a.(map[string]any)
	bm, _ := b.(map[string]any)
	out := maps.Clone(am)
	for k, v := range bm {
		if prev, ok := out[k]; ok {
			out[k] = map[string]any{"allOf": []any{prev, v}}
			continue
		}
		out[k] = v
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

func asStrings(v any) []string {
	var out []string
	switch x := v.(type) {
	case string:
		out = append(out, x)
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func unionStrings(a, b any) any {
	seen := map[string]bool{}
	var out []any
	for _, s := range append(asStrings(a), asStrings(b)...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// intersectTypes intersects two type keywords; integer is within number.
// An empty intersection keeps b, and the document will not fit.
func intersectTypes(a, b any) any {
	as, bs := asStrings(a), asStrings(b)
	var out []any
	for _, x := range as {
		for _, y := range bs {
			switch {
			case x == y:
				out = append(out, x)
			case x == "integer" && y == "number", x == "number" && y == "integer":
				out = append(out, "integer")
			}
		}
	}
	if len(out) == 0 {
		return b
	}
	return out
}

// numExtreme returns the larger (sign 1) or smaller (sign -1) of two
// numeric keywords.
func numExtreme(a, b any, sign int) any {
	ar, aok := rat(a)
	br, bok := rat(b)
	switch {
	case !aok:
		return b
	case !bok:
		return a
	case ar.Cmp(br)*sign >= 0:
		return a
	}
	return b
}

// rat reads a JSON number keyword exactly. A number with an exponent
// beyond ±400 reads as absent: big.Rat would spell out every digit.
func rat(v any) (*big.Rat, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return nil, false
	}
	if i := strings.IndexAny(string(n), "eE"); i >= 0 {
		exp, err := strconv.Atoi(string(n[i+1:]))
		if err != nil || exp > 400 || exp < -400 {
			return nil, false
		}
	}
	return new(big.Rat).SetString(string(n))
}

// intKeyword reads a non-negative integer keyword such as minLength.
func intKeyword(s map[string]any, k string) (int, bool) {
	r, ok := rat(s[k])
	if !ok || !r.IsInt() || r.Sign() < 0 || !r.Num().IsInt64() {
		return 0, false
	}
	return int(min(r.Num().Int64(), genMaxCount)), true
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
