package approvals

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/arbiter-run/arbiter/projector"
)

// Errors [DecodePresentation] returns. Each is wrapped with the approval's id
// and kind; ErrBadPresentation also wraps the cause (a [*jsonform.Error] or
// an encoding/json error), so errors.Is and errors.As reach both.
var (
	// ErrNoPresentation marks an approval that carries nothing to show: its
	// presentation is absent, null, or the empty object.
	ErrNoPresentation = errors.New("approval has no presentation")
	// ErrBadPresentation marks a presentation that is present but cannot be
	// read back: it fails the JSON boundary, or it does not decode into the
	// type asked for.
	ErrBadPresentation = errors.New("approval presentation cannot be decoded")
)

// DecodePresentation decodes a's presentation, the JSON a policy gave the
// operator to read, into T. It is for a front end that renders an approval
// and for a consumer that rechecks one before it resumes a run.
//
// An absent presentation, JSON null and the empty object {} all mean "no
// presentation" and return [ErrNoPresentation] with the zero T: NeedApproval
// records {} for a policy that gave none, so the recorded bytes cannot tell
// "none" from "empty", and neither holds anything for a person to check. A
// caller that accepts an empty presentation tests for ErrNoPresentation and
// goes on with the zero T.
//
// A presentation that fails [jsonform.Validate], or that encoding/json cannot
// decode into T, returns [ErrBadPresentation] wrapping the cause. Decoding
// follows encoding/json: object members T has no field for are ignored, so a
// T that must match exactly implements json.Unmarshaler itself.
func DecodePresentation[T any](a projector.Approval) (T, error) {
	var v T
	p := a.Presentation
	if len(bytes.TrimSpace(p)) == 0 {
		return v, fmt.Errorf("approval %s (%s): %w: presentation is absent", a.ID, a.Kind, ErrNoPresentation)
	}
	if err := jsonform.Validate(p); err != nil {
		return v, fmt.Errorf("approval %s (%s): %w: %w", a.ID, a.Kind, ErrBadPresentation, err)
	}
	if jsonform.Equal(p, []byte("null")) || jsonform.Equal(p, []byte("{}")) {
		return v, fmt.Errorf("approval %s (%s): %w: presentation is %s", a.ID, a.Kind, ErrNoPresentation, bytes.TrimSpace(p))
	}
	if err := json.Unmarshal(p, &v); err != nil {
		var zero T
		return zero, fmt.Errorf("approval %s (%s): %w: into %s: %w", a.ID, a.Kind, ErrBadPresentation, reflect.TypeFor[T](), err)
	}
	return v, nil
}
