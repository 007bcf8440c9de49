package testkit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/testkit"
)

// genSchemas are schemas of the shapes tools declare, each with the
// constructs the generator claims to handle.
var genSchemas = []struct {
	name   string
	schema string
}{
	{"flat object", pathSchema},
	{"nested objects", `{"type":"object","required":["user"],"additionalProperties":false,"properties":{
		"user":{"type":"object","required":["name","address"],"additionalProperties":false,"properties":{
			"name":{"type":"string","minLength":2,"maxLength":20},
			"address":{"type":"object","required":["city"],"properties":{"city":{"type":"string"},"zip":{"type":"string","pattern":"^\\d{5}$"}}}}},
		"note":{"type":["string","null"]}}}`},
	{"arrays with bounds", `{"type":"object","required":["tags","matrix"],"properties":{
		"tags":{"type":"array","items":{"type":"string","enum":["a","b","c","d","e","f"]},"minItems":1,"maxItems":3,"uniqueItems":true},
		"matrix":{"type":"array","minItems":2,"maxItems":2,"items":{"type":"array","items":{"type":"integer"},"maxItems":4}}}}`},
	{"pattern", `{"type":"object","required":["ticket"],"properties":{"ticket":{"type":"string","pattern":"^[a-z]{3,8}-\\d{2}$"}}}`},
	{"patterns with groups", `{"type":"object","required":["branch","ref"],"properties":{
		"branch":{"type":"string","pattern":"^(feature|fix)/[a-z0-9_]+(-[a-z0-9]+)*$","maxLength":40},
		"ref":{"type":"string","pattern":"^v?\\d+\\.\\d+(\\.\\d+)?$"}}}`},
	{"enums and const", `{"type":"object","required":["level","mode","version"],"properties":{
		"level":{"enum":["low","high",3,null,{"x":1}]},"mode":{"const":"dry-run"},"version":{"type":"integer","const":2}}}`},
	{"numeric bounds", `{"type":"object","required":["count","ratio","step","temp","neg"],"properties":{
		"count":{"type":"integer","minimum":1,"maximum":10},
		"ratio":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1},
		"step":{"type":"integer","multipleOf":5,"minimum":-12,"maximum":42},
		"temp":{"type":"number","multipleOf":0.1,"minimum":-3.5,"maximum":3.5},
		"neg":{"type":"integer","exclusiveMaximum":0}}}`},
	{"oneOf", `{"type":"object","required":["target"],"properties":{"target":{"oneOf":[
		{"type":"object","required":["host"],"properties":{"host":{"type":"string","format":"hostname"}},"additionalProperties":false},
		{"type":"object","required":["url"],"properties":{"url":{"type":"string","format":"uri"}},"additionalProperties":false},
		{"type":"integer","minimum":1}]}}}`},
	{"ref to $defs and definitions", `{"$defs":{"email":{"type":"string","format":"email","maxLength":60}},
		"definitions":{"recipient":{"type":"object","required":["to"],"properties":{"to":{"$ref":"#/$defs/email"},"cc":{"type":"array","items":{"$ref":"#/$defs/email"},"maxItems":3}}}},
		"type":"object","required":["recipients"],"properties":{"recipients":{"type":"array","minItems":1,"items":{"$ref":"#/definitions/recipient"}}}}`},
	{"recursive ref", `{"$defs":{"node":{"type":"object","required":["name"],"properties":{"name":{"type":"string","minLength":1},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}}}},"$ref":"#/$defs/node"}`},
	{"allOf and anyOf", `{"allOf":[
		{"type":"object","required":["id"],"properties":{"id":{"type":"string","pattern":"^[A-F0-9]{8}$"}}},
		{"required":["kind"],"properties":{"kind":{"anyOf":[{"const":"a"},{"type":"boolean"}]}}}]}`},
}

func TestGenerateArgs_SatisfiesSchema(t *testing.T) {
	const n, wantRate = 200, 0.95
	for i, tt := range genSchemas {
		t.Run(tt.name, func(t *testing.T) {
			ct, err := driver.Compile(testkit.NewLedger("tool", events.ReadOnly, tt.schema))
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			r := rand.New(rand.NewPCG(1, uint64(i)))
			passed := 0
			var first error
			for range n {
				doc, err := testkit.GenerateArgs(json.RawMessage(tt.schema), r)
				if err != nil {
					t.Fatalf("generate: %v", err)
				}
				if _, err := driver.CheckArgs(ct.Tool, doc); err != nil {
					if first == nil {
						first = errors.Join(err, errors.New("document: "+string(doc)))
					}
					continue
				}
				passed++
			}
			rate := float64(passed) / n
			t.Logf("%d of %d documents pass (%.1f%%)", passed, n, 100*rate)
			if rate < wantRate {
				t.Errorf("got %d of %d passing (%.1f%%), want at least %.0f%%; first refusal: %v", passed, n, 100*rate, 100*wantRate, first)
			}
		})
	}
}

func TestGenerateArgs_PatternsMatch(t *testing.T) {
	patterns := []string{
		`^[a-z]{3,8}-\d{2}$`, `^\w+@\w+\.(com|org)$`, `^(a|bc|def)+$`, `x?y*z+`, `^[^a-z]{2}$`,
		`^[A-Z][a-z]*( [A-Z][a-z]*){0,2}$`, `^\d{4}-\d{2}-\d{2}$`, `^.{3}$`, `(?i)^abc$`, `^[\-+]?\d+$`,
	}
	r := rand.New(rand.NewPCG(2, 2))
	for _, p := range patterns {
		re := regexp.MustCompile(p)
		schema, err := jsonform.Marshal(map[string]string{"type": "string", "pattern": p})
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			doc, err := testkit.GenerateArgs(schema, r)
			if err != nil {
				t.Fatalf("pattern %q: %v", p, err)
			}
			var s string
			if err := json.Unmarshal(doc, &s); err != nil {
				t.Fatalf("pattern %q: got %s, want a JSON string: %v", p, doc, err)
			}
			if !re.MatchString(s) {
				t.Errorf("pattern %q: got %q, which it does not match", p, s)
			}
		}
	}
}

func TestGenerateArgs_IsDeterministic(t *testing.T) {
	for _, tt := range genSchemas {
		a := rand.New(rand.NewPCG(7, 7))
		b := rand.New(rand.NewPCG(7, 7))
		for i := range 20 {
			x, errX := testkit.GenerateArgs(json.RawMessage(tt.schema), a)
			y, errY := testkit.GenerateArgs(json.RawMessage(tt.schema), b)
			if errX != nil || errY != nil {
				t.Fatalf("%s: generate: %v, %v", tt.name, errX, errY)
			}
			if !bytes.Equal(x, y) {
				t.Fatalf("%s: draw %d: got %s and %s from one seed, want the same bytes", tt.name, i, x, y)
			}
		}
	}
}

func TestGenerateArgs_OutputIsPolicyJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, tt := range genSchemas {
		for range 20 {
			doc, err := testkit.GenerateArgs(json.RawMessage(tt.schema), r)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			canon, err := jsonform.PolicyJSON(doc)
			if err != nil {
				t.Fatalf("%s: got %s, which is not usable JSON: %v", tt.name, doc, err)
			}
			if !bytes.Equal(canon, doc) {
				t.Fatalf("%s: got %s, want its PolicyJSON form %s", tt.name, doc, canon)
			}
		}
	}
}

func TestGenerateArgs_UnusableSchemaIsError(t *testing.T) {
	schemas := map[string]string{
		"not JSON":         `{"type":`,
		"false schema":     `false`,
		"false property":   `{"type":"object","required":["a"],"properties":{"a":false}}`,
		"missing ref":      `{"$ref":"#/$defs/nothing"}`,
		"remote ref":       `{"$ref":"https://example.com/schema.json"}`,
		"bad pattern":      `{"type":"string","pattern":"(unclosed"}`,
		"endless required": `{"type":"object","required":["next"],"properties":{"next":{"$ref":"#"}}}`,
		"ref cycle":        `{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
	}
	r := rand.New(rand.NewPCG(4, 4))
	for name, s := range schemas {
		_, err := testkit.GenerateArgs(json.RawMessage(s), r)
		if !errors.Is(err, testkit.ErrGenerate) {
			t.Errorf("%s: got error %v, want one wrapping ErrGenerate", name, err)
		}
	}
}

// FuzzGenerateArgs holds that any schema gives either an error or one
// document in PolicyJSON form, and never a panic.
func FuzzGenerateArgs(f *testing.F) {
	for _, tt := range genSchemas {
		f.Add([]byte(tt.schema), uint64(1))
	}
	f.Add([]byte(`{"type":"integer","minimum":1e500}`), uint64(2))
	f.Add([]byte(`{"type":"array","minItems":5,"maxItems":1}`), uint64(3))
	f.Add([]byte(`{"type":"number","multipleOf":0.001,"exclusiveMinimum":true,"minimum":1}`), uint64(4))
	f.Fuzz(func(t *testing.T, schema []byte, seed uint64) {
		doc, err := testkit.GenerateArgs(schema, rand.New(rand.NewPCG(seed, 0)))
		if err != nil {
			if !errors.Is(err, testkit.ErrGenerate) {
				t.Fatalf("got error %v, want one wrapping ErrGenerate", err)
			}
			return
		}
		canon, err := jsonform.PolicyJSON(doc)
		if err != nil || !bytes.Equal(canon, doc) {
			t.Fatalf("got %q, want one document in PolicyJSON form (%v)", doc, err)
		}
	})
}
