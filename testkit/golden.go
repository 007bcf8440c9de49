package testkit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbiter-run/arbiter/jsonform"
)

// PolicyJSON returns s in PolicyJSON form, failing the test if s is not
// boundary-clean JSON.
func PolicyJSON(t testing.TB, s string) json.RawMessage {
	t.Helper()
	b, err := jsonform.PolicyJSON([]byte(s))
	if err != nil {
		t.Fatalf("PolicyJSON(%s): %v", s, err)
	}
	return b
}

// Golden compares got with testdata/name, or rewrites that file when update
// is set (each test binary declares its own -update flag and passes it).
func Golden(t testing.TB, name, got string, update bool) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file: %v (write it with go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("differs from %s (rewrite with -update if the change is right)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
