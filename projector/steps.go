package projector

import (
	"encoding/json"
	"iter"
)

// chunk is how many steps share one block of memory. Full blocks are frozen:
// never written again, so every copy of a view shares them.
const chunk = 8

// Steps is a run's steps in order, as an immutable value: a copy costs the
// same whatever the run's length (the frozen blocks are shared, only the
// last, open block is copied), and nothing a holder does through the methods
// below can change what another holder sees, because they hand out copies.
// This keeps the cost of a step independent of the steps before it, even
// though the agent and the policy each get their own copy of the view every
// step.
//
// The zero value is an empty sequence.
type Steps struct {
	frozen [][]Step // full blocks of exactly chunk steps; never modified
	open   []Step   // the last block, owned by this value alone
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

// mut returns the i-th step for the fold to change in place. Only the open
// block is ever changed: the fold changes no step but the last, and the last
// step always lives in the open block (see push).
func (s *Steps) mut(i int) *Step {
	if i < len(s.frozen)*chunk {
		panic("projector: a frozen step is never changed")
	}
	return &s.open[i-len(s.frozen)*chunk]
}

// push appends a step. A full open block is frozen first, so the new step
// (the one the fold will change next) starts a fresh open block.
func (s *Steps) push(st Step) {
	if len(s.open) == chunk {
		// Cap the shared list so an append never writes into a backing
		// array another copy can see.
		s.frozen = append(s.frozen[:len(s.frozen):len(s.frozen)], s.open)
		s.open = make([]Step, 0, chunk)
	}
	s.open = append(s.open, st)
}

// clone shares the frozen blocks and deep-copies the open one.
func (s Steps) clone() Steps {
	c := Steps{frozen: s.frozen[:len(s.frozen):len(s.frozen)]}
	if s.open != nil {
		c.open = make([]Step, len(s.open), chunk)
		for i, st := range s.open {
			c.open[i] = st.clone()
		}
	}
	return c
}

// StepsOf builds a sequence from steps (copied), for tests and for views
// built by hand.
func StepsOf(steps ...Step) Steps {
	var s Steps
	for _, st := range steps {
		s.push(st.clone())
	}
	return s
}

// MarshalJSON writes the steps as a JSON array.
func (s Steps) MarshalJSON() ([]byte, error) {
	return json.Marshal(s.Slice())
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
