package projector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
)

// chunk is how many steps share one block of memory. Full blocks are frozen:
// never written again, so every copy of a view shares them.
const chunk = 8

// Steps is a run's steps in order, as a persistent value: copying it (see
// [View.Clone]) shares everything and costs nothing, whatever the run's
// length, and nothing a holder does through the methods below can change
// what another holder sees, because they hand out copies. This keeps the
// cost of a step independent of the steps before it, even though the agent
// and the policy each get their own copy of the view every step.
//
// The fold changes only the last step, and the last step is held in the
// value itself (last), not in a block: every copy of a Steps has its own, so
// the fold changes it in place, with no allocation. The steps before it live
// in blocks that are never written once built: full blocks of chunk steps,
// shared by every copy, and one open block of fewer, replaced (never
// appended to, since another copy may hold it) when a new step pushes the
// last one into it. The fold replaces a step's pointers, never writes
// through them, so sharing a step's pointers is safe too.
//
// The zero value is an empty sequence.
type Steps struct {
	frozen  [][]Step // full blocks of exactly chunk steps; never modified
	open    []Step   // fewer than chunk steps after the frozen ones; never modified
	last    Step     // the last step, when hasLast
	hasLast bool
}

// Len is the number of steps.
func (s Steps) Len() int {
	n := len(s.frozen)*chunk + len(s.open)
	if s.hasLast {
		n++
	}
	return n
}

// At returns a copy of the i-th step (0-based). It panics if i is out of
// range, as indexing a slice does.
func (s Steps) At(i int) Step {
	return s.ref(i).clone()
}

// Last returns a copy of the last step, and false if there is none.
func (s Steps) Last() (Step, bool) {
	if !s.hasLast {
		return Step{}, false
	}
	return s.last.clone(), true
}

// All yields a copy of every step, in order.
func (s Steps) All() iter.Seq[Step] {
	return func(yield func(Step) bool) {
		for i := 0; i < s.Len(); i++ {
			if !yield(s.At(i)) {
				return
			}
		}
	}
}

// Slice returns copies of every step as a slice.
func (s Steps) Slice() []Step {
	out := make([]Step, 0, s.Len())
	for st := range s.All() {
		out = append(out, st)
	}
	return out
}

func (s *Steps) ref(i int) *Step {
	before := len(s.frozen)*chunk + len(s.open)
	switch {
	case i < 0 || i > before || (i == before && !s.hasLast):
		panic(fmt.Sprintf("projector: step index %d out of range [0:%d]", i, s.Len()))
	case i == before:
		return &s.last
	case i < len(s.frozen)*chunk:
		return &s.frozen[i/chunk][i%chunk]
	}
	return &s.open[i-len(s.frozen)*chunk]
}

// mut returns the i-th step for the fold to change. Only the last step is
// ever changed, and it is this value's own (see Steps).
func (s *Steps) mut(i int) *Step {
	if !s.hasLast || i != s.Len()-1 {
		panic("projector: only the last step is ever changed")
	}
	return &s.last
}

// push appends a step: the last one moves into a new open block (a full
// one is frozen), and st becomes the last.
func (s *Steps) push(st Step) {
	if s.hasLast {
		open := make([]Step, len(s.open)+1)
		copy(open, s.open)
		open[len(s.open)] = s.last
		if len(open) == chunk {
			// Cap the list so appending reallocates: its backing array may
			// be shared with another value.
			s.frozen = append(s.frozen[:len(s.frozen):len(s.frozen)], open)
			open = nil
		}
		s.open = open
	}
	s.last, s.hasLast = st, true
}

// clone shares everything: no block of s is ever written again, and the
// last step is copied with the value.
func (s Steps) clone() Steps { return s }

// StepsOf builds a sequence from steps (copied), for tests and for views
// built by hand.
func StepsOf(steps ...Step) Steps {
	var s Steps
	for _, st := range steps {
		s.push(st.clone())
	}
	return s
}

// MarshalJSON writes the steps as a JSON array, without HTML escaping: the
// PolicyJSON they hold must come back byte for byte.
func (s Steps) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s.Slice()); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// UnmarshalJSON reads a JSON array of steps.
func (s *Steps) UnmarshalJSON(b []byte) error {
	var steps []Step
	if err := json.Unmarshal(b, &steps); err != nil {
		return err
	}
	*s = StepsOf(steps...)
	return nil
}
