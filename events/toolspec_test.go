package events_test

import (
	"encoding/json"
	"testing"

	"github.com/arbiter-run/arbiter/events"
)

// A spec without a pin or fixed arguments hashes as it did before those
// fields existed (recorded runs keep their hashes); either field changes it.
func TestHashToolSpec_PinAndFixedAreBound(t *testing.T) {
	base := events.ToolSpec{Name: "t", Schema: json.RawMessage(`{"type":"object"}`), SideEffect: events.ReadOnly, TimeoutMS: 1000}
	h0, err := events.HashToolSpec(base)
	if err != nil {
		t.Fatal(err)
	}
	// The hash this spec had before Pin and Fixed were added.
	const before = "ccfb308a5f9c37bf896401c6104343f14d86a448330bad83118dfe22f3d090eb"
	if h0 != before {
		t.Errorf("hash of a spec with neither field: got %s, want %s", h0, before)
	}
	pinned, fixed := base, base
	pinned.Pin = "abc"
	fixed.Fixed = `{"root":"/srv"}`
	for name, s := range map[string]events.ToolSpec{"pin": pinned, "fixed": fixed} {
		h, err := events.HashToolSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		if h == h0 {
			t.Errorf("%s: hash unchanged by the field", name)
		}
	}
}
