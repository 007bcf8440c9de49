package testkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/arbiter-run/arbiter/jsonform"
)

// ErrGenerate marks a schema [GenerateArgs] cannot draw a document from: one
// that is not JSON, the false schema, a $ref it cannot resolve, a pattern Go
// cannot parse, or recursion that never bottoms out.
var ErrGenerate = errors.New("cannot generate arguments")

// genMaxDepth bounds how deep the generator nests values and follows $ref,
// allOf, anyOf and oneOf; genGrowDepth is the depth past which it adds
// nothing optional, so recursive schemas bottom out.
// genBudget bounds how many values one document holds, and genMaxCount
// the count or length a min keyword can force, so no schema makes the
// generator run away.
const (
	genMaxDepth  = 48
	genGrowDepth = 8
	genBudget    = 1 << 16
	genMaxCount  = 1 << 12
)

// GenerateArgs draws one JSON document from schema using r, in PolicyJSON
// form. It is deterministic: the same schema and the same state of r give
// the same bytes.
//
// It aims to satisfy the schema and usually does, but it is a generator,
// not a solver: it understands type (and type arrays), properties, required,
// additionalProperties, patternProperties, min/maxProperties, items,
// prefixItems, min/maxItems, uniqueItems, contains, min/maxLength, enum,
// const, pattern (generated from the regexp/syntax parse tree), the formats
// email, uri, date-time, date, time, uuid, hostname and ipv4, minimum,
// maximum, exclusiveMinimum and exclusiveMaximum (numbers, or draft-4
// booleans), multipleOf, oneOf and anyOf (one branch), allOf (merged), and
// $ref to "#", "#/$defs/…" or "#/definitions/…". Other keywords (not,
// if/then/else, dependencies, …) are ignored, so a document may not fit;
// check it with [driver.CompiledTool.CheckArgs] before use, as [Never] does.
//
// Errors wrap [ErrGenerate].
func GenerateArgs(schema json.RawMessage, r *rand.Rand) (json.RawMessage, error) {
	canon, err := jsonform.PolicyJSON(schema)
	if err != nil {
		return nil, fmt.Errorf("%w: schema is not usable JSON: %w", ErrGenerate, err)
	}
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("%w: decode schema: %w", ErrGenerate, err)
	}
	g := &gen{root: root, r: r}
	v, err := g.value(root, 0)
	if err != nil {
		return nil, err
	}
	out, err := jsonform.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: encode document: %w", ErrGenerate, err)
	}
	return out, nil
}

// gen draws values from a decoded schema. Values are built from map[string]any,
// []any, string, json.Number, bool and nil, and encoded once at the end.
type gen struct {
	root  any
	r     *rand.Rand
	drawn int
}

func (g *gen) errf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrGenerate, fmt.Sprintf(format, a...))
}

// value draws a value for schema s (a bool or an object) at depth.
func (g *gen) value(s any, depth int) (any, error) {
	if depth > genMaxDepth {
		return nil, g.errf("schema nests or refers deeper than %d levels", genMaxDepth)
	}
	if g.drawn++; g.drawn > genBudget {
		return nil, g.errf("document would hold more than %d values", genBudget)
	}
	switch x := s.(type) {
	case bool:
		if !x {
			return nil, g.errf("the false schema admits no value")
		}
		return g.anyValue(), nil
	case map[string]any:
		return g.fromSchema(x, depth)
	}
	return nil, g.errf("schema of JSON type %T is neither an object nor a boolean", s)
}

// fromSchema draws from an object schema: it first reduces $ref, allOf, oneOf
// and anyOf to a single merged schema, then enum and const, then the type.
func (g *gen) fromSchema(s map[string]any, depth int) (any, error) {
	if ref, ok := s["$ref"].(string); ok {
		target, err := g.resolve(ref)
		if err != nil {
			return nil, err
		}
		return g.value(mergeSchemas(target, without(s, "$ref")), depth+1)
	}
	if all, ok := s["allOf"].([]any); ok {
		var merged any = without(s, "allOf")
		for _, b := range all {
			b, err := g.deref(b)
			if err != nil {
				return nil, err
			}
			merged = mergeSchemas(merged, b)
		}
		return g.value(merged, depth+1)
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if bs, ok := s[k].([]any); ok && len(bs) > 0 {
			b, err := g.deref(bs[g.r.IntN(len(bs))])
			if err != nil {
				return nil, err
			}
			return g.value(mergeSchemas(without(s, k), b), depth+1)
		}
	}
	if c, ok := s["const"]; ok {
		return c, nil
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[g.r.IntN(len(e))], nil
	}
	switch g.pickType(s) {
	case "object":
		return g.object(s, depth)
	case "array":
		return g.array(s, depth)
	case "string":
		return g.str(s)
	case "integer":
		return g.integer(s), nil
	case "number":
		return g.number(s), nil
	case "boolean":
		return g.r.IntN(2) == 0, nil
	case "null":
		return nil, nil
	}
	return g.anyValue(), nil
}

// pickType chooses one of the schema's types, or infers one from the
// keywords present; "" means anything goes.
func (g *gen) pickType(s map[string]any) string {
	switch t := s["type"].(type) {
	case string:
		return t
	case []any:
		if len(t) > 0 {
			if name, ok := t[g.r.IntN(len(t))].(string); ok {
				return name
			}
		}
	}
	has := func(keys ...string) bool {
		for _, k := range keys {
			if _, ok := s[k]; ok {
				return true
			}
		}
		return false
	}
	switch {
	case has("properties", "required", "additionalProperties", "patternProperties", "minProperties", "maxProperties"):
		return "object"
	case has("items", "prefixItems", "minItems", "maxItems", "contains", "uniqueItems"):
		return "array"
	case has("minLength", "maxLength", "pattern", "format"):
		return "string"
	case has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
		return "number"
	}
	return ""
}

// anyValue draws something plausible where the schema allows anything.
func (g *gen) anyValue() any {
	switch g.r.IntN(6) {
	case 0:
		return json.Number(strconv.Itoa(g.r.IntN(1000)))
	case 1:
		return g.r.IntN(2) == 0
	case 2:
		return nil
	}
	return g.word(1, 10)
}

// deref follows b's $ref, if it is only a reference, so branches merge as
// the schemas they name.
func (g *gen) deref(b any) (any, error) {
	for range genMaxDepth {
		m, ok := b.(map[string]any)
		if !ok {
			return b, nil
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return b, nil
		}
		target, err := g.resolve(ref)
		if err != nil {
			return nil, err
		}
		b = mergeSchemas(target, without(m, "$ref"))
	}
	return nil, g.errf("$ref chain longer than %d", genMaxDepth)
}

// resolve finds a local reference ("#" or a JSON pointer after "#") in the
// root schema.
func (g *gen) resolve(ref string) (any, error) {
	if ref == "#" {
		return g.root, nil
	}
	if !strings.HasPrefix(ref, "#/") {
		return nil, g.errf("$ref %q is not local (want \"#\", \"#/$defs/…\" or \"#/definitions/…\")", ref)
	}
	cur := g.root
	for _, tok := range strings.Split(ref[2:], "/") {
		if t, err := url.PathUnescape(tok); err == nil {
			tok = t
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := cur.(type) {
		case map[string]any:
			next, ok := x[tok]
			if !ok {
				return nil, g.errf("$ref %q: no %q", ref, tok)
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, g.errf("$ref %q: no index %q", ref, tok)
			}
			cur = x[i]
		default:
			return nil, g.errf("$ref %q: %q is inside a scalar", ref, tok)
		}
	}
	return cur, nil
}

// without returns a shallow copy of s minus key.
func without(s map[string]any, key string) map[string]any {
	out := make(map[string]any, len(s))
	for k, v := range s {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// object draws an object: every required property, each optional one with
// even odds (none past genGrowDepth), and filler members up to
// minProperties where additionalProperties allows.
func (g *gen) object(s map[string]any, depth int) (any, error) {
	props, _ := s["properties"].(map[string]any)
	maxProps, hasMax := intKeyword(s, "maxProperties")
	minProps, _ := intKeyword(s, "minProperties")
	out := map[string]any{}
	add := func(name string) error {
		v, err := g.value(g.propertySchema(s, props, name), depth+1)
		if err != nil {
			return fmt.Errorf("property %q: %w", name, err)
		}
		out[name] = v
		return nil
	}
	for _, name := range asStrings(s["required"]) {
		if _, done := out[name]; !done {
			if err := add(name); err != nil {
				return nil, err
			}
		}
	}
	optional := []string{}
	for _, name := range sortedKeys(props) {
		if _, done := out[name]; !done {
			optional = append(optional, name)
		}
	}
	for i, name := range optional {
		if hasMax && len(out) >= maxProps {
			break
		}
		short := len(optional)-i <= minProps-len(out)
		if short || (depth < genGrowDepth && g.r.IntN(2) == 0) {
			if err := add(name); err != nil {
				return nil, err
			}
		}
	}
	if s["additionalProperties"] != false {
		for i := 1; len(out) < minProps && i <= minProps+len(props); i++ {
			name := "extra" + strconv.Itoa(i)
			if _, taken := out[name]; !taken {
				if err := add(name); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// propertySchema is the schema a member called name must satisfy: its
// properties entry, else the first patternProperties entry it matches, else
// additionalProperties, else a string.
func (g *gen) propertySchema(s, props map[string]any, name string) any {
	if p, ok := props[name]; ok {
		return p
	}
	if pp, ok := s["patternProperties"].(map[string]any); ok {
		for _, pat := range sortedKeys(pp) {
			if re, err := regexp.Compile(pat); err == nil && re.MatchString(name) {
				return pp[pat]
			}
		}
	}
	if ap, ok := s["additionalProperties"]; ok && ap != false {
		return ap
	}
	return map[string]any{"type": "string"}
}

// array draws between minItems and maxItems elements (at most four past
// minItems, and exactly minItems past genGrowDepth), from prefixItems or a
// draft-7 items list first, then items or additionalItems.
func (g *gen) array(s map[string]any, depth int) (any, error) {
	lo, _ := intKeyword(s, "minItems")
	hi, hasMax := intKeyword(s, "maxItems")
	if !hasMax || hi > lo+4 {
		hi = lo + 4
	}
	n := lo
	if depth < genGrowDepth && hi > lo {
		n = lo + g.r.IntN(hi-lo+1)
	}
	prefix := asList(s["prefixItems"])
	var rest any = true
	switch it := s["items"].(type) {
	case []any:
		prefix = it
		if ai, ok := s["additionalItems"]; ok {
			rest = ai
		}
	case nil:
	default:
		rest = it
	}
	unique := s["uniqueItems"] == true
	seen := map[string]bool{}
	out := make([]any, 0, n)
	for i := 0; i < n; i++ {
		item := rest
		if i < len(prefix) {
			item = prefix[i]
		}
		v, err := g.item(item, depth, unique, seen)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		out = append(out, v)
	}
	if c, ok := s["contains"]; ok {
		v, err := g.item(c, depth, unique, seen)
		if err != nil {
			return nil, fmt.Errorf("contains: %w", err)
		}
		if len(out) > len(prefix) {
			out[len(prefix)+g.r.IntN(len(out)-len(prefix))] = v
		} else if !hasMax || len(out) < hi {
			out = append(out, v)
		}
	}
	return out, nil
}

// item draws one element; with unique set it tries a few times for one not
// yet seen.
func (g *gen) item(s any, depth int, unique bool, seen map[string]bool) (any, error) {
	var v any
	for range 8 {
		var err error
		if v, err = g.value(s, depth+1); err != nil {
			return nil, err
		}
		if !unique {
			return v, nil
		}
		b, err := jsonform.Marshal(v)
		if err != nil || !seen[string(b)] {
			seen[string(b)] = true
			return v, nil
		}
	}
	return v, nil
}

// str draws a string from pattern, format or the plain alphabet, trying a
// few times for one that fits minLength and maxLength.
func (g *gen) str(s map[string]any) (any, error) {
	lo, _ := intKeyword(s, "minLength")
	hi, hasMax := intKeyword(s, "maxLength")
	if !hasMax {
		hi = genMaxCount
	}
	pattern, hasPattern := s["pattern"].(string)
	format, _ := s["format"].(string)
	var v string
	for range 24 {
		if hasPattern {
			p, err := g.pattern(pattern)
			if err != nil {
				return nil, err
			}
			v = p
		} else if f, ok := g.format(format); ok {
			v = f
		} else {
			return g.word(lo, min(hi, max(lo+10, 10))), nil
		}
		if n := utf8.RuneCountInString(v); n >= lo && n <= hi {
			return v, nil
		}
	}
	return v, nil
}

const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// word draws a lower-case alphanumeric string of lo to hi characters; the
// empty string only when lo is zero, and then rarely.
func (g *gen) word(lo, hi int) string {
	if hi < lo {
		hi = lo
	}
	n := lo + g.r.IntN(hi-lo+1)
	if n == 0 && hi > 0 && g.r.IntN(4) != 0 {
		n = 1
	}
	var b strings.Builder
	for range n {
		b.WriteByte(alphabet[g.r.IntN(len(alphabet))])
	}
	return b.String()
}

func (g *gen) letters(n int) string {
	var b strings.Builder
	for range n {
		b.WriteByte(alphabet[g.r.IntN(26)])
	}
	return b.String()
}

// format draws a plausible value of one of the string formats tools most
// often declare, or reports that it knows no such format.
func (g *gen) format(name string) (string, bool) {
	r := g.r
	switch name {
	case "email", "idn-email":
		return g.letters(1+r.IntN(8)) + "@" + g.letters(3+r.IntN(6)) + ".example.com", true
	case "uri", "uri-reference", "iri", "url":
		return "https://" + g.letters(3+r.IntN(6)) + ".example.com/" + g.word(0, 8), true
	case "date-time":
		return fmt.Sprintf("20%02d-%02d-%02dT%02d:%02d:%02dZ", r.IntN(40), 1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60)), true
	case "date":
		return fmt.Sprintf("20%02d-%02d-%02d", r.IntN(40), 1+r.IntN(12), 1+r.IntN(28)), true
	case "time":
		return fmt.Sprintf("%02d:%02d:%02dZ", r.IntN(24), r.IntN(60), r.IntN(60)), true
	case "uuid":
		return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", r.Uint32(), r.IntN(1<<16), r.IntN(1<<12), 0x8000|r.IntN(1<<14), r.Uint64()&(1<<48-1)), true
	case "hostname":
		return g.letters(3+r.IntN(6)) + ".example.com", true
	case "ipv4":
		return fmt.Sprintf("%d.%d.%d.%d", 1+r.IntN(254), r.IntN(256), r.IntN(256), 1+r.IntN(254)), true
	}
	return "", false
}
