package events_test

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/arbiter-run/arbiter/events"
)

// chain builds n encoded events of one run, chained as Append chains them.
func chain(t *testing.T, run string, n int) [][]byte {
	t.Helper()
	var out [][]byte
	prev := ""
	for i := 1; i <= n; i++ {
		k, body := events.StepDecided, any(events.StepDecidedBody{Step: i - 1, Tool: "t"})
		if i == 1 {
			k, body = events.RunCreated, events.RunCreatedBody{}
		}
		e := mustEvent(t, run, k, body)
		e.Seq, e.Prev = uint64(i), prev
		d, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
		prev = events.Hash(d)
	}
	return out
}

func TestVerifyChain_PassesAndNamesFirstBadEvent(t *testing.T) {
	good := chain(t, "r", 6)
	if err := events.VerifyChain("r", good); err != nil {
		t.Fatalf("good chain: %v", err)
	}
	copyOf := func() [][]byte {
		c := make([][]byte, len(good))
		for i := range good {
			c[i] = append([]byte(nil), good[i]...)
		}
		return c
	}
	altered := copyOf()
	altered[2] = bytes.Replace(altered[2], []byte(`"tool":"t"`), []byte(`"tool":"u"`), 1)
	missing := copyOf()
	missing = append(missing[:3], missing[4:]...)
	swapped := copyOf()
	swapped[1], swapped[2] = swapped[2], swapped[1]
	garbage := copyOf()
	garbage[4] = []byte(`{"v":1`)
	for _, tc := range []struct {
		name  string
		datas [][]byte
		index int
	}{
		// Altering event 2 shows at event 3, whose prev no longer matches.
		{"altered", altered, 3},
		{"missing", missing, 3},
		{"swapped", swapped, 1},
		{"garbage", garbage, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := events.VerifyChain("r", tc.datas)
			var ce *events.ChainError
			if !errors.As(err, &ce) || !errors.Is(err, events.ErrBrokenChain) {
				t.Fatalf("got %v, want a ChainError", err)
			}
			if ce.Index != tc.index {
				t.Errorf("first bad event: got index %d, want %d (%v)", ce.Index, tc.index, err)
			}
		})
	}
	if err := events.VerifyChain("other", good); !errors.Is(err, events.ErrBrokenChain) {
		t.Errorf("chain of another run: got %v", err)
	}
}

func TestDecode_Refusals(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"empty", ``},
		{"not json", `nope`},
		{"duplicate key", `{"v":1,"v":1,"id":"a","run":"r","seq":1,"kind":"run.created","time":"2026-01-01T00:00:00Z","body":{}}`},
		{"version", `{"v":2,"id":"a","run":"r","seq":1,"kind":"run.created","time":"2026-01-01T00:00:00Z","body":{}}`},
		{"no id", `{"v":1,"run":"r","seq":1,"kind":"run.created","time":"2026-01-01T00:00:00Z","body":{}}`},
		{"no seq", `{"v":1,"id":"a","run":"r","kind":"run.created","time":"2026-01-01T00:00:00Z","body":{}}`},
		{"bad run", `{"v":1,"id":"a","run":"r.x","seq":1,"kind":"run.created","time":"2026-01-01T00:00:00Z","body":{}}`},
		{"unknown kind", `{"v":1,"id":"a","run":"r","seq":1,"kind":"run.exploded","time":"2026-01-01T00:00:00Z","body":{}}`},
		{"no body", `{"v":1,"id":"a","run":"r","seq":1,"kind":"run.created","time":"2026-01-01T00:00:00Z"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := events.Decode([]byte(tc.in)); !errors.Is(err, events.ErrMalformed) {
				t.Errorf("got %v, want ErrMalformed", err)
			}
		})
	}
}

func TestNew_RefusesBadRunAndKind(t *testing.T) {
	if _, err := events.New("a.b", events.RunCreated, struct{}{}); !errors.Is(err, events.ErrMalformed) {
		t.Errorf("bad run id: %v", err)
	}
	if _, err := events.New("a", events.Kind("x"), struct{}{}); !errors.Is(err, events.ErrMalformed) {
		t.Errorf("bad kind: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"id":"a","run":"r","seq":1,"kind":"run.created","time":"2026-01-01T00:00:00Z","body":{}}`))
	f.Add([]byte(`{"v":1,"id":"a","run":"r","seq":1,"kind":"step.decided","time":"2026-01-01T00:00:00Z","body":{"step":1,"tool":"x","args":"{\"a\":1}"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := events.Decode(b)
		if err != nil {
			return
		}
		// What decodes re-encodes and decodes to the same envelope.
		d, err := e.Encode()
		if err != nil {
			t.Fatalf("encode decoded event: %v", err)
		}
		e2, err := events.Decode(d)
		if err != nil {
			t.Fatalf("decode re-encoded event: %v", err)
		}
		if e2.ID != e.ID || e2.Seq != e.Seq || e2.Kind != e.Kind || e2.Run != e.Run {
			t.Fatalf("round trip changed the envelope: %+v vs %+v", e, e2)
		}
	})
}

// TestNewID_UniqueAndOrdered: ids made at once by many goroutines are all
// different, and each goroutine's ids increase.
func TestNewID_UniqueAndOrdered(t *testing.T) {
	const goroutines, each = 8, 20000
	all := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]string, each)
			for i := range ids {
				ids[i] = events.NewID()
			}
			all[g] = ids
		}()
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*each)
	for g, ids := range all {
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("id %s made twice", id)
			}
			seen[id] = true
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("goroutine %d: id %s after %s", g, id, ids[i-1])
			}
		}
	}
}
