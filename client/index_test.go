package client

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
)

// TestNewest_WidensAndNarrows: the newest n run.created messages are found
// whether they sit far apart (the window must widen past other events) or
// close together (it must narrow), and before a cursor.
func TestNewest_WidensAndNarrows(t *testing.T) {
	j := testkit.JetStream(t)
	log := j.Log(t, events.Config{})
	ctx := t.Context()
	noise := events.Tail{}
	add := func(run string, k events.Kind, body any, tail events.Tail) events.Tail {
		t.Helper()
		ev, err := events.New(run, k, body)
		if err != nil {
			t.Fatal(err)
		}
		next, err := log.Append(ctx, tail, ev)
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	noise = add("noise", events.RunCreated, events.RunCreatedBody{}, noise)
	var want []string
	// Ten runs 100 events apart, then 200 runs in a row.
	for i := range 10 {
		run := fmt.Sprintf("far-%d", i)
		add(run, events.RunCreated, events.RunCreatedBody{}, events.Tail{})
		want = append(want, run)
		for range 100 {
			noise = add("noise", events.RunTools, events.RunToolsBody{}, noise)
		}
	}
	ids := func(before uint64, n int) ([]string, uint64) {
		t.Helper()
		msgs, err := newest(ctx, log, 0, log.KindFilter(0, events.RunCreated), before, n)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range msgs {
			e, err := events.Decode(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e.Run)
		}
		if len(msgs) == 0 {
			return out, 0
		}
		return out, msgs[0].Sequence
	}
	got, oldest := ids(0, 3)
	if !slices.Equal(got, want[7:]) {
		t.Errorf("newest 3 far apart: %v, want %v", got, want[7:])
	}
	if got, _ = ids(oldest, 4); !slices.Equal(got, want[3:7]) {
		t.Errorf("4 before the cursor: %v, want %v", got, want[3:7])
	}
	if got, _ = ids(0, 50); !slices.Equal(got, append([]string{"noise"}, want...)) {
		t.Errorf("more than there are: %v", got)
	}
	for i := range 200 {
		run := fmt.Sprintf("near-%03d", i)
		add(run, events.RunCreated, events.RunCreatedBody{}, events.Tail{})
		want = append(want, run)
	}
	if got, _ = ids(0, 3); !slices.Equal(got, want[len(want)-3:]) {
		t.Errorf("newest 3 close together: %v, want %v", got, want[len(want)-3:])
	}
}

// FuzzParseCursor: a cursor from a URL either parses into one position per
// shard that prints back as itself, or is refused as a bad request.
func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"", "0", "12.0.7", "1.2", "x", "-1", "18446744073709551616", "1..2"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, shards int) {
		if shards < 1 || shards > 1024 {
			return
		}
		c, err := parseCursor(s, shards)
		if err != nil {
			if !errors.Is(err, ErrBadFilter) {
				t.Fatalf("parseCursor(%q): %v, not a bad request", s, err)
			}
			return
		}
		if len(c) != shards {
			t.Fatalf("parseCursor(%q, %d): %d positions", s, shards, len(c))
		}
		if s != "" {
			if again, err := parseCursor(c.String(), shards); err != nil || !slices.Equal(again, c) {
				t.Fatalf("cursor %q printed as %q, which parses as %v (%v)", s, c.String(), again, err)
			}
		}
	})
}
