package projector

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/arbiter-run/arbiter/events"
)

// TestSteps_CopiesPushingAtOnceKeepTheirOwn: copies of one sequence that
// push at once, from goroutines of their own, each end with their own
// steps, and the sequence they were copied from is unchanged. Every count
// of open steps is tried, so some pushes find the slot after their end
// free (and write in place) and the others find it taken.
func TestSteps_CopiesPushingAtOnceKeepTheirOwn(t *testing.T) {
	step := func(n int, who string) Step { return Step{N: n, Decision: events.StepDecidedBody{Step: n, Tool: who}} }
	for base := 0; base <= 2*chunk+1; base++ {
		var s Steps
		for i := range base {
			s.push(step(i, "base"))
		}
		const copies, more = 6, chunk + 3
		got := make([]Steps, copies)
		var wg sync.WaitGroup
		for c := range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				mine := s
				for i := range more {
					mine.push(step(base+i, fmt.Sprint("copy ", c)))
				}
				got[c] = mine
			}()
		}
		wg.Wait()
		if s.Len() != base {
			t.Fatalf("base %d: the original now has %d steps", base, s.Len())
		}
		for i := range base {
			if st := s.At(i); st.N != i || st.Decision.Tool != "base" {
				t.Fatalf("base %d: the original's step %d is now %d %q", base, i, st.N, st.Decision.Tool)
			}
		}
		for c, g := range got {
			if g.Len() != base+more {
				t.Fatalf("base %d: copy %d has %d steps, want %d", base, c, g.Len(), base+more)
			}
			for i := range g.Len() {
				want := "base"
				if i >= base {
					want = fmt.Sprint("copy ", c)
				}
				if st := g.At(i); st.N != i || st.Decision.Tool != want {
					t.Fatalf("base %d: copy %d's step %d is %d %q, want %d %q", base, c, i, st.N, st.Decision.Tool, i, want)
				}
			}
		}
	}
}

// TestSteps_PushWritesInPlaceOnlyAtTheEnd: a push from the value holding
// the open block's last claimed slot writes into that block; a push from
// an older copy moves to a fresh block.
func TestSteps_PushWritesInPlaceOnlyAtTheEnd(t *testing.T) {
	var s Steps
	s.push(Step{N: 0})
	s.push(Step{N: 1})
	s.push(Step{N: 2}) // open: steps 0 and 1
	old := s
	s.push(Step{N: 3})
	if &s.open[0] != &old.open[0] {
		t.Fatal("the push from the end of the open block copied it")
	}
	old.push(Step{N: 9})
	if &old.open[0] == &s.open[0] {
		t.Fatal("the push from an older copy wrote into the shared block")
	}
	if st := s.At(2); st.N != 2 {
		t.Fatalf("the newer copy's step 2 is %d", st.N)
	}
	if st := old.At(2); st.N != 2 {
		t.Fatalf("the older copy's step 2 is %d", st.N)
	}
}

// TestSteps_LookaheadLeavesTheRoom: a lookahead copy's push copies the
// open steps and claims nothing, so the value it was taken from still
// pushes in place afterwards, and neither sees the other's step.
func TestSteps_LookaheadLeavesTheRoom(t *testing.T) {
	var s Steps
	for i := range 3 {
		s.push(Step{N: i})
	}
	look := s.lookaheadCopy()
	look.push(Step{N: 30})
	look.push(Step{N: 40})
	if &look.open[0] == &s.open[0] {
		t.Fatal("the lookahead pushed into the shared block")
	}
	before := &s.open[0]
	s.push(Step{N: 3})
	if &s.open[0] != before {
		t.Fatal("after a lookahead, the value's own push copied its block")
	}
	for i, want := range []int{0, 1, 2, 3} {
		if st := s.At(i); st.N != want {
			t.Fatalf("step %d is %d, want %d", i, st.N, want)
		}
	}
	for i, want := range []int{0, 1, 2, 30, 40} {
		if st := look.At(i); st.N != want {
			t.Fatalf("the lookahead's step %d is %d, want %d", i, st.N, want)
		}
	}
}

// TestSteps_FrozenListGrowsByDoubling: a run's pushes move the frozen list
// to a new array only when its room is full (a few times for a thousand
// blocks), not on every block as a copy-on-freeze list would, so a step
// costs the same however long the run; an older copy that freezes a block
// moves to its own list and leaves the newer one's alone; a lookahead
// freezes nothing.
func TestSteps_FrozenListGrowsByDoubling(t *testing.T) {
	var s Steps
	moves, at := 0, (*[]Step)(nil)
	for i := range 1000 * chunk {
		s.push(Step{N: i})
		if len(s.frozen) > 0 && &s.frozen[0] != at {
			moves, at = moves+1, &s.frozen[0]
		}
	}
	if moves > 12 {
		t.Fatalf("the frozen list moved %d times in 1,000 blocks, want about log2(1000)", moves)
	}
	old := s
	for i := range chunk {
		s.push(Step{N: 8000 + i})
	}
	for i := range chunk {
		old.push(Step{N: 9000 + i})
	}
	if old.At(7999).N != 7999 || old.At(8000).N != 9000 || s.At(8000).N != 8000 || old.Len() != s.Len() {
		t.Fatalf("copies freezing at once: old %d at 8000, new %d at 8000", old.At(8000).N, s.At(8000).N)
	}
	for i := range s.Len() {
		if got := s.At(i).N; got != i {
			t.Fatalf("step %d of the newer copy is %d", i, got)
		}
	}
	for len(s.open) != chunk-1 {
		s.push(Step{N: s.Len()})
	}
	look := s.lookaheadCopy()
	look.push(Step{N: -1})
	look.push(Step{N: -2})
	if len(look.frozen) != len(s.frozen) || &look.frozen[0] != &s.frozen[0] {
		t.Fatal("a lookahead push past a full block froze it")
	}
	if look.At(s.Len()).N != -1 || look.Len() != s.Len()+2 {
		t.Fatalf("the lookahead reads %d at %d, length %d", look.At(s.Len()).N, s.Len(), look.Len())
	}
}

// TestSteps_LookaheadPushHoldsThePriorStep: a lookahead's first push, the
// decision a policy is shown, holds the step before it by value and
// allocates nothing; its later pushes copy. At every length of the open
// block, with and without frozen blocks, the lookahead reads its own
// steps, the value it came from reads its own, and that value's next push
// is still in place.
func TestSteps_LookaheadPushHoldsThePriorStep(t *testing.T) {
	for base := range 3*chunk + 1 {
		for pushes := 1; pushes <= 3; pushes++ {
			var s Steps
			for i := range base {
				s.push(Step{N: i})
			}
			look := s.lookaheadCopy()
			for k := range pushes {
				look.push(Step{N: 1000 + k})
			}
			want := make([]int, 0, base+pushes)
			for i := range base {
				want = append(want, i)
			}
			for k := range pushes {
				want = append(want, 1000+k)
			}
			if got := stepNs(look); !slices.Equal(got, want) {
				t.Fatalf("base %d, %d lookahead pushes: the lookahead reads %v, want %v", base, pushes, got, want)
			}
			if last, ok := look.Last(); !ok || last.N != 1000+pushes-1 {
				t.Fatalf("base %d, %d pushes: the lookahead's last step is %d", base, pushes, last.N)
			}
			var before *Step
			if len(s.open) > 0 {
				before = &s.open[0]
			}
			s.push(Step{N: base})
			if before != nil && len(s.open) > 0 && &s.open[0] != before {
				t.Fatalf("base %d: after a lookahead, the value's own push copied its block", base)
			}
			if got := stepNs(s); len(got) != base+1 || got[base] != base {
				t.Fatalf("base %d: the value reads %v after its push", base, got)
			}
			if got := stepNs(look); !slices.Equal(got, want) {
				t.Fatalf("base %d, %d pushes: after the value's push the lookahead reads %v, want %v", base, pushes, got, want)
			}
		}
	}
	var s Steps
	for i := range 5 {
		s.push(Step{N: i})
	}
	if n := testing.AllocsPerRun(100, func() {
		look := s.lookaheadCopy()
		look.push(Step{N: 99})
		if look.Len() != 6 {
			panic("length")
		}
	}); n != 0 {
		t.Fatalf("a lookahead's first push allocates %.0f times, want none", n)
	}
}

func stepNs(s Steps) []int {
	var out []int
	for st := range s.All() {
		out = append(out, st.N)
	}
	return out
}
