package kvwindows_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/arbiter-run/arbiter/internal/bucket"
	"github.com/arbiter-run/arbiter/rules/kvwindows"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTake_CountsEveryCallOnceAcrossConnections: 16 takers on two
// connections make 100 calls against a limit of 50: exactly 50 are
// counted, each seeing a different count before it.
func TestTake_CountsEveryCallOnceAcrossConnections(t *testing.T) {
	env := testkit.JetStream(t)
	nc, err := nats.Connect(env.Server.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js2, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	w1, err := kvwindows.Open(t.Context(), env.JS, kvwindows.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := kvwindows.Open(t.Context(), js2, kvwindows.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var befores []int64
	refused := 0
	var wg sync.WaitGroup
	for g := range 16 {
		w := w1
		if g%2 == 1 {
			w = w2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 / 16 {
				before, taken, err := w.Take(t.Context(), "rate.p.r.0", 50)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if taken {
					befores = append(befores, before)
				} else {
					refused++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(befores)
	if len(befores) != 50 || befores[0] != 0 || befores[49] != 49 || len(slices.Compact(befores)) != 50 {
		t.Errorf("taken with counts %v (%d), want each of 0..49 once", befores, len(befores))
	}
	if refused != 16*(100/16)-50 {
		t.Errorf("%d refused, want %d", refused, 16*(100/16)-50)
	}
}

func TestTake_Refusals(t *testing.T) {
	env := testkit.JetStream(t)
	w, err := kvwindows.Open(t.Context(), env.JS, kvwindows.Config{Bucket: "RATES_T"})
	if err != nil {
		t.Fatal(err)
	}
	if before, taken, err := w.Take(t.Context(), "rate.zero", 0); err != nil || taken || before != 0 {
		t.Errorf("limit 0: %d %v %v, want never taken", before, taken, err)
	}
	// Written as a worker writes a count, but not a count.
	if _, err := bucket.New(env.JS, "RATES_T").Put(t.Context(), "rate.bad", []byte("lots")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.Take(t.Context(), "rate.bad", 5); err == nil || !strings.Contains(err.Error(), `"lots", not a count`) {
		t.Errorf("a window holding no count: %v, want it named", err)
	}
	// A count, but not written as a worker writes one (no mark): what a
	// relayed reply, an older version or another tool would store.
	kv, err := env.JS.KeyValue(t.Context(), "RATES_T")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "rate.unmarked", []byte("0")); err != nil {
		t.Fatal(err)
	}
	if n, taken, err := w.Take(t.Context(), "rate.unmarked", 5); !errors.Is(err, bucket.ErrNotWritten) || taken {
		t.Errorf("a window holding an unmarked count: %d, %v, %v: want refused with %v", n, taken, err, bucket.ErrNotWritten)
	}
	if _, _, err := w.Take(t.Context(), "bad key!", 5); err == nil || errors.Is(err, kvwindows.ErrContended) {
		t.Errorf("an invalid key: %v, want the KV's error", err)
	}
}
