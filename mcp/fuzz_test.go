package mcp

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/arbiter-run/arbiter/jsonform"
)

// Any bytes are a lock or an ErrLock, never a panic; a lock that parses
// writes back to one that parses the same.
func FuzzParseLock(f *testing.F) {
	f.Add([]byte(`{"version":1,"servers":{"fs":{"read":{"hash":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","description":"d","input_schema":"s","annotations":"a"}}}}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := parseLock("fuzz", b)
		if err != nil {
			if !errors.Is(err, ErrLock) {
				t.Fatalf("error %v is not ErrLock", err)
			}
			return
		}
		out, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseLock("again", out); err != nil {
			t.Fatalf("a parsed lock does not parse again: %v", err)
		}
	})
}

// The schema checks and the argument merge never panic; a merge that
// succeeds holds every fixed argument.
func FuzzSchemaAndMerge(f *testing.F) {
	f.Add([]byte(`{"type":"object","properties":{"a":{"$ref":"#/$defs/x"},"root":{}},"required":["root"]}`), []byte(`{"a":1}`))
	f.Add([]byte(`{"$ref":"file:///etc/passwd"}`), []byte(`{}`))
	f.Add([]byte(`[]`), []byte(`{"root":"/"}`))
	fixed := []byte(`{"root":"/srv"}`)
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		_ = selfContained(schema)
		_, _ = modelSchema(schema, fixed)
		canon, err := jsonform.PolicyJSON(args)
		if err != nil {
			return
		}
		merged, err := mergeFixed(canon, fixed)
		if err != nil {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(merged, &m); err != nil || string(m["root"]) != `"/srv"` {
			t.Fatalf("merged %s: root %s, %v", merged, m["root"], err)
		}
	})
}
