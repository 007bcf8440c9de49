//go:build !race

// The race detector makes sync.Pool drop items at random, so allocation
// counts are only meaningful without it.

package jsonform

import "testing"

func TestHotPathsDoNotAllocate(t *testing.T) {
	doc := []byte(benchDoc)
	buf := make([]byte, 0, len(doc))
	other := []byte(`{"tool":"x","arguments":{"b":1,"a":[1,2,{"d":"\u00e9","c":null}]}}`)
	// Warm the pool.
	_ = Validate(doc)
	_, _ = AppendPolicyJSON(buf, doc)
	_ = Equal(doc, other)
	cases := map[string]func(){
		"Check":            func() { _ = Validate(doc) },
		"AppendPolicyJSON": func() { buf, _ = AppendPolicyJSON(buf[:0], doc) },
		"Equal":            func() { _ = Equal(doc, doc) },
		"Equal(unequal)":   func() { _ = Equal(doc, other) },
		"Check(unsorted)":  func() { _ = Validate(other) },
		"Append(unsorted)": func() { buf, _ = AppendPolicyJSON(buf[:0], other) },
	}
	for name, fn := range cases {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", name, n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = PolicyJSON(doc) }); n != 1 {
		t.Errorf("PolicyJSON: %v allocations per run, want 1 (the result)", n)
	}
}
