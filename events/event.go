package events

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/oklog/ulid/v2"
)

// FormatVersion is the envelope version this package writes and reads.
const FormatVersion = 1

// Event is one transition of one run: the envelope every message on the runs
// stream carries.
//
// ID is unique per event and doubles as the JetStream message id, so a
// retried append of the same event is recognised rather than stored twice.
// Seq is the event's 1-based position in its run and Prev the hex SHA-256 of
// the previous event's encoded bytes ("" for the first), both filled in by
// [Log.Append] from the tail it is fenced on.
type Event struct {
	V    int             `json:"v"`
	ID   string          `json:"id"`
	Run  string          `json:"run"`
	Seq  uint64          `json:"seq"`
	Kind Kind            `json:"kind"`
	Time time.Time       `json:"time"`
	Prev string          `json:"prev,omitempty"`
	Body json.RawMessage `json:"body"`
}

// Errors callers branch on.
var (
	// ErrMalformed marks an event (or a body) that cannot be decoded or does
	// not satisfy the envelope's rules.
	ErrMalformed = errors.New("malformed event")
	// ErrBrokenChain marks a run whose events do not form an unbroken hash
	// chain: one was altered, removed, reordered or inserted.
	ErrBrokenChain = errors.New("broken event chain")
)

// New builds an event of kind k for run with body marshalled to JSON. It
// gives the event a fresh id and the current time; Seq and Prev are left for
// [Log.Append].
func New(run string, k Kind, body any) (Event, error) {
	if err := ValidRunID(run); err != nil {
		return Event{}, err
	}
	if err := k.check(); err != nil {
		return Event{}, err
	}
	b, err := marshalBody(body)
	if err != nil {
		return Event{}, fmt.Errorf("new %s event: %w", k, err)
	}
	return Event{V: FormatVersion, ID: NewID(), Run: run, Kind: k, Time: time.Now().UTC(), Body: b}, nil
}

// NewID returns a fresh, time-ordered, unique id (a ULID). Within one
// millisecond the ids of a process count up from a random start by random
// steps (ulid.Monotonic), so the system's random source is read once a
// millisecond, not once an id: a driver makes three ids a step.
func NewID() string {
	var id ulid.ULID
	ids.Lock()
	err := id.SetTime(ulid.Now())
	if err == nil {
		// Read into the guarded buffer: id's own bytes would escape
		// through the entropy's reader.
		err = ids.entropy.MonotonicRead(id.Time(), ids.buf[:])
		copy(id[6:], ids.buf[:])
	}
	ids.Unlock()
	if err != nil {
		// As ulid.MustNew: the clock is past the year 10889, or the
		// system's random source failed.
		panic(err)
	}
	var text [ulid.EncodedSize]byte
	_ = id.MarshalTextTo(text[:]) // cannot fail: text is the right size
	return string(text[:])
}

var ids = struct {
	sync.Mutex
	entropy *ulid.MonotonicEntropy
	buf     [10]byte
}{entropy: ulid.Monotonic(rand.Reader, 0)}

func marshalBody(body any) (json.RawMessage, error) {
	// Room for the whole body at once (see bodySize), instead of growing
	// the buffer as it is written.
	if n, ok := bodySize(body); ok {
		if b, ok := appendBody(make([]byte, 0, n), body); ok {
			return b, nil
		}
	}
	return encodeJSON(body)
}

// encodeJSON is encoding/json's encoding of v without HTML escaping (so
// PolicyJSON reads back byte for byte) and without the trailing newline.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// Encode returns the bytes stored for e: the JSON envelope, with the body
// embedded exactly as it is (it must be one boundary-clean JSON value) and no
// HTML escaping anywhere, so what a reader decodes is what the writer held.
func (e Event) Encode() ([]byte, error) {
	if len(e.Body) == 0 {
		return nil, fmt.Errorf("encode event %s: no body", e.ID)
	}
	// The time is formatted first, so that the buffer is made once at its
	// final size: a guess short of the envelope (the previous hash alone
	// is 64 bytes) reallocated it whole, body and all, on the last append.
	var tb [64]byte
	t := e.Time.AppendFormat(tb[:0], time.RFC3339Nano)
	n := len(`{"v":`) + intLen(int64(e.V)) + len(`,"id":`) + quotedLen(e.ID) + len(`,"run":`) + quotedLen(e.Run) +
		len(`,"seq":`) + uintLen(e.Seq) + len(`,"kind":`) + quotedLen(string(e.Kind)) + len(`,"time":""`) + len(t) +
		len(`,"body":`) + len(e.Body) + 1
	if e.Prev != "" {
		n += len(`,"prev":`) + quotedLen(e.Prev)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(e.V), 10)
	b = append(b, `,"id":`...)
	b = appendString(b, e.ID)
	b = append(b, `,"run":`...)
	b = appendString(b, e.Run)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"kind":`...)
	b = appendString(b, string(e.Kind))
	b = append(b, `,"time":`...)
	b = append(b, '"')
	b = append(b, t...)
	b = append(b, '"')
	if e.Prev != "" {
		b = append(b, `,"prev":`...)
		b = appendString(b, e.Prev)
	}
	b = append(b, `,"body":`...)
	b = append(b, e.Body...)
	return append(b, '}'), nil
}

// appendString appends s as a JSON string, exactly as encoding/json writes
// it without HTML escaping (see encodeJSON).
func appendString(b []byte, s string) []byte { return jsonform.AppendQuoted(b, s, false) }

// Decode parses stored bytes into an event. It refuses anything that is not
// one boundary-clean JSON value (see [jsonform.Validate]), an unknown version or
// kind, or an envelope missing its id, run or position. Errors wrap
// [ErrMalformed].
func Decode(b []byte) (Event, error) {
	if err := jsonform.Validate(b); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	switch {
	case e.V != FormatVersion:
		return Event{}, fmt.Errorf("%w: format version %d (want %d)", ErrMalformed, e.V, FormatVersion)
	case e.ID == "":
		return Event{}, fmt.Errorf("%w: no event id", ErrMalformed)
	case e.Seq == 0:
		return Event{}, fmt.Errorf("%w: event %s has no position in its run", ErrMalformed, e.ID)
	case len(e.Body) == 0:
		return Event{}, fmt.Errorf("%w: event %s has no body", ErrMalformed, e.ID)
	}
	if err := ValidRunID(e.Run); err != nil {
		return Event{}, fmt.Errorf("%w: event %s: %w", ErrMalformed, e.ID, err)
	}
	if err := e.Kind.check(); err != nil {
		return Event{}, fmt.Errorf("event %s: %w", e.ID, err)
	}
	return e, nil
}

// DecodeBody decodes e's body into T. Errors wrap [ErrMalformed] and name the
// event.
func DecodeBody[T any](e Event) (T, error) {
	var v T
	if err := json.Unmarshal(e.Body, &v); err != nil {
		return v, fmt.Errorf("%w: %s event %s (run %s #%d): %w", ErrMalformed, e.Kind, e.ID, e.Run, e.Seq, err)
	}
	return v, nil
}

// Hash is the SHA-256 of an event's encoded bytes: what the next event of the
// run carries as Prev.
func Hash(data []byte) string {
	s := sha256.Sum256(data)
	var text [2 * sha256.Size]byte
	hex.Encode(text[:], s[:])
	return string(text[:])
}

// ChainError says where a run's chain breaks.
type ChainError struct {
	Index   int    // position in the slice handed to VerifyChain
	Seq     uint64 // the event's recorded position in its run (0 if unreadable)
	EventID string // the event's id ("" if unreadable)
	Reason  string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("event chain broken at index %d (seq %d, id %q): %s", e.Index, e.Seq, e.EventID, e.Reason)
}

// Unwrap returns [ErrBrokenChain].
func (e *ChainError) Unwrap() error { return ErrBrokenChain }

// VerifyChain checks that datas, the encoded events of one run from its first
// event on, form an unbroken hash chain: each decodes, belongs to run, sits at
// the next position, and names the hash of the one before. The first failure
// is returned as a *[ChainError] naming the first bad event.
func VerifyChain(run string, datas [][]byte) error {
	prev := ""
	for i, d := range datas {
		e, err := Decode(d)
		if err != nil {
			return &ChainError{Index: i, Reason: err.Error()}
		}
		bad := func(format string, a ...any) error {
			return &ChainError{Index: i, Seq: e.Seq, EventID: e.ID, Reason: fmt.Sprintf(format, a...)}
		}
		switch {
		case e.Run != run:
			return bad("belongs to run %q", e.Run)
		case e.Seq != uint64(i)+1:
			return bad("position %d where %d was expected (an event is missing or out of order)", e.Seq, i+1)
		case e.Prev != prev:
			return bad("previous hash %q does not match the event before (%q): an event was altered or removed", e.Prev, prev)
		case i == 0 && e.Kind != RunCreated:
			return bad("first event is %s, not %s", e.Kind, RunCreated)
		}
		prev = Hash(d)
	}
	return nil
}
