package projector

import (
	"bytes"
	"encoding/json"
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
// The fold never writes into a block another value may hold: a change to
// the last step, or a new step, builds a new open block (at most chunk
// steps, copied shallowly: the fold replaces a step's pointers, never
// writes through them).
//
// The zero value is an empty sequence.
type Steps struct {
	frozen [][]Step // full blocks of exactly chunk steps; never modified
	open   []Step   // the last block; replaced, never written, once shared
}

// Len is the number of steps.
func (s Steps) Len() int { return len(s.frozen)*chunk + len(s.open) }

// At returns a copy of the i-th step (0-based). It panics if i is out of
// range, as indexing a slice does.
func (s Steps) At(i int) Step {
	return s.ref(i).clone()
}

// Last returns a copy of the last step, and false if there is none.
func (s Steps) Last() (Step, bool) {
	if s.Len() == 0 {
		return Step{}, false
	}
	return s.At(s.Len() - 1), true
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
	if i < len(s.frozen)*chunk {
		return &s.frozen[i/chunk][i%chunk]
	}
	return &s.open[i-len(s.frozen)*chunk]
}

// mut returns the i-th step for the fold to change, in a new open block of
// this value's own. Only the last step is ever changed, and it always lives
// in the open block (see push).
func (s *Steps) mut(i int) *Step {
	if i < len(s.frozen)*chunk {
		panic("projector: a frozen step is never changed")
	}
	open := make([]Step, len(s.open), chunk)
	copy(open, s.open)
	s.open = open
	return &s.open[i-len(s.frozen)*chunk]
}

// push appends a step in a new open block. A full open block is frozen
// first, so the new step (the one the fold will change next) starts a fresh
// block.
func (s *Steps) push(st Step) {
	if len(s.open) == chunk {
		// Cap the list so appending reallocates: its backing array may be
		// shared with another value.
		s.frozen = append(s.frozen[:len(s.frozen):len(s.frozen)], s.open)
		s.open = nil
	}
	open := make([]Step, len(s.open)+1, chunk)
	copy(open, s.open)
	open[len(s.open)] = st
	s.open = open
}

// clone shares everything: no block of s is ever written again.
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
