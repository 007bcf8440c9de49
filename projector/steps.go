package projector

import (
	"bytes"
	"encoding/json"
	"fmt"
	"iter"
	"sync/atomic"
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
// in blocks of chunk steps, and a step in a block is never written again
// once it is there. Full blocks are frozen, shared by every copy. The open
// block, of fewer steps, is shared too, and a push writes into its room only
// past every copy's end: the block counts the slots claimed in it, and a
// push whose own end is not the last claimed (another copy pushed there
// first) copies its steps to a fresh block instead. The fold replaces a
// step's pointers, never writes through them, so sharing a step's pointers
// is safe too.
//
// The zero value is an empty sequence.
type Steps struct {
	frozen [][]Step // full blocks of exactly chunk steps; never modified
	open   []Step   // fewer than chunk steps after the frozen ones, in a block
	// claim is the open block's count of claimed slots, held as the room of
	// an empty slice so that reflect.DeepEqual, which compares a slice's
	// elements and not its room, sees two equal sequences as equal however
	// many slots copies of either have claimed. frozenClaim is the same for
	// the list of frozen blocks, which grows by doubling its room: without
	// it, every frozen block copied the whole list, a cost that grew with
	// the run.
	claim       []atomic.Int32
	frozenClaim []atomic.Int32
	last        Step // the last step, when hasLast
	hasLast     bool
	// lookahead marks a copy to be thrown away (see [View.Lookahead]): its
	// pushes claim nothing and freeze nothing, so a lookahead never copies
	// the frozen list. Its first push moves the last step into prior, held
	// by value after the open steps, so it copies nothing either; a second
	// push copies the open steps and prior into a fresh slice (its open
	// steps may then number chunk or more).
	lookahead bool
	prior     Step // the step before last, in a lookahead, when hasPrior
	hasPrior  bool
}

// block is the memory of chunk steps, and the count of its slots that
// some copy of a Steps has claimed.
type block struct {
	steps   [chunk]Step
	claimed [1]atomic.Int32
}

// Len is the number of steps.
func (s Steps) Len() int {
	n := len(s.frozen)*chunk + len(s.open)
	if s.hasPrior {
		n++
	}
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
	frozen := len(s.frozen) * chunk
	blocks := frozen + len(s.open)
	switch {
	case i < 0 || i >= s.Len():
		panic(fmt.Sprintf("projector: step index %d out of range [0:%d]", i, s.Len()))
	case i < frozen:
		return &s.frozen[i/chunk][i%chunk]
	case i < blocks:
		return &s.open[i-frozen]
	case s.hasPrior && i == blocks:
		return &s.prior
	}
	return &s.last
}

// mut returns the i-th step for the fold to change. Only the last step is
// ever changed, and it is this value's own (see Steps).
func (s *Steps) mut(i int) *Step {
	if !s.hasLast || i != s.Len()-1 {
		panic("projector: only the last step is ever changed")
	}
	return &s.last
}

// push appends a step: the last one moves into the open block (a full
// one is frozen), and st becomes the last. The move is in place when the
// slot after this value's open steps is free, claimed atomically so that
// two copies pushing at once cannot both take it; otherwise the open steps
// are copied into a fresh block. Either way no other copy's steps change.
func (s *Steps) push(st Step) {
	if s.hasLast {
		n := len(s.open)
		switch {
		case s.lookahead && !s.hasPrior:
			s.prior, s.hasPrior = s.last, true
			s.last = st
			return
		case s.lookahead:
			open := make([]Step, n, n+2)
			copy(open, s.open)
			s.open, s.claim = append(open, s.prior), nil
			s.prior, s.hasPrior = Step{}, false
		case s.claim == nil || !s.claim[:1][0].CompareAndSwap(int32(n), int32(n+1)):
			b := new(block)
			copy(b.steps[:], s.open)
			b.claimed[0].Store(int32(n + 1))
			s.open, s.claim = b.steps[:n:chunk], b.claimed[:0:1]
		}
		s.open = append(s.open, s.last)
		if len(s.open) == chunk && !s.lookahead {
			s.freeze()
		}
	}
	s.last, s.hasLast = st, true
}

// lookaheadCopy returns a copy of s whose pushes claim nothing (see
// [View.Lookahead]).
func (s Steps) lookaheadCopy() Steps {
	s.lookahead = true
	return s
}

// freeze moves the full open block to the frozen list: in place when the
// slot after this value's list is free in its room (claimed atomically, as
// push claims a block's slot), and otherwise into a list of twice the room.
func (s *Steps) freeze() {
	n := len(s.frozen)
	if s.frozenClaim == nil || n == cap(s.frozen) || !s.frozenClaim[:1][0].CompareAndSwap(int32(n), int32(n+1)) {
		list := make([][]Step, n, max(4, 2*n))
		copy(list, s.frozen)
		claimed := new([1]atomic.Int32)
		claimed[0].Store(int32(n + 1))
		s.frozen, s.frozenClaim = list, claimed[:0:1]
	}
	s.frozen = append(s.frozen, s.open)
	s.open, s.claim = nil, nil
}

// clone shares everything: no step below s's ends is ever written again,
// and the last step is copied with the value.
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
