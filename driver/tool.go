package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/jsonform"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Spec is a tool as it is registered.
type Spec struct {
	Name        string
	Description string
	// Schema is the JSON Schema the arguments must satisfy. Required.
	Schema json.RawMessage
	// SideEffect is one of [events.SideEffects]. The policy switches on
	// it; nothing verifies the claim.
	SideEffect events.SideEffect
	// Timeout bounds one execution. Required.
	Timeout time.Duration
	// Terminal: a successful call completes the run with its result.
	Terminal bool
	// Pin, for a tool defined outside the runtime, is the hash it was
	// reviewed as (recorded, and so bound by approvals). Optional.
	Pin string
	// Fixed is a JSON object of arguments the tool sets itself on every call,
	// hidden from the model's schema; recorded in PolicyJSON form, and so
	// bound by approvals. Optional.
	Fixed json.RawMessage
	// Data, Tags and Resource are recorded with the spec for rules files to
	// match (see [events.ToolSpec]); nothing verifies them.
	Data     []string
	Tags     []string
	Resource string
}

// Tool is a capability the agent may request. Execute receives the
// arguments in PolicyJSON form, already checked against the schema, and must
// honour ctx (its deadline is the spec's timeout).
type Tool interface {
	Spec() Spec
	Execute(ctx context.Context, args json.RawMessage) (string, error)
}

// Reconciliation is what a tool says about a call that was interrupted.
type Reconciliation int

// The answers a reconcile hook can give.
const (
	Unknown Reconciliation = iota // cannot tell: an operator must decide
	Done                          // it took effect; the result is returned
	NotDone                       // it did not; the call may be evaluated again
)

// Reconciler is an optional hook of a [Tool]: asked after a crash whether an
// interrupted call took effect.
type Reconciler interface {
	Reconcile(ctx context.Context, args json.RawMessage) (Reconciliation, string, error)
}

// Inline is an optional interface of a [Tool] whose Execute returns soon
// after its ctx ends, whatever it is doing. The driver runs such a tool on
// the goroutine that drives the run, when Inline says so, rather than on
// one it could leave behind: a call costs no hand-off between goroutines.
// A panic is still the call's tool_error, and a result returned after ctx
// ended is taken as the deadline's (as if the driver had stopped waiting);
// under a busy hook (see [WithBusy]) the tool runs as any other.
//
// Any other tool runs on a goroutine the drive keeps for its calls, one
// after another (a fresh stack for each call would be grown again from
// nothing, which is most of a call's cost for a client that runs deep); a
// call that overruns its timeout is left behind on it, and the next call
// gets another.
type Inline interface {
	Inline() bool
}

// ArgsError says why arguments were refused: which tool, where in the
// arguments (a JSON pointer), and what was wrong.
type ArgsError struct {
	Tool    string
	Pointer string
	Reason  string
	// Err is the underlying error: a *[jsonform.Error] when the bytes are
	// not one usable JSON value, nil for a schema violation.
	Err error
}

func (e *ArgsError) Error() string {
	if e.Pointer == "" {
		return fmt.Sprintf("arguments of %s: %s", e.Tool, e.Reason)
	}
	return fmt.Sprintf("arguments of %s at %s: %s", e.Tool, e.Pointer, e.Reason)
}

func (e *ArgsError) Unwrap() error { return e.Err }

// Malformed reports whether the arguments were not usable JSON at all (as
// opposed to JSON the schema refused).
func (e *ArgsError) Malformed() bool { return e.Err != nil }

// ErrInterrupted, wrapped by an error from [Tool.Execute], says the call was
// cut off with its effect unknown (the server that ran it died mid-call, or
// stopped answering): the driver resolves it as it resolves a call a crash
// interrupted (a read-only call runs once more, anything else waits for an
// operator), never as an ordinary tool error the agent may simply retry.
var ErrInterrupted = errors.New("call interrupted")

// ErrBadTool marks a tool the driver refuses to register.
var ErrBadTool = errors.New("unusable tool")

// CompiledTool is a tool whose schema is compiled once, with its spec as
// recorded in runs (schema in PolicyJSON form, with its hash).
type CompiledTool struct {
	Tool   Tool
	Spec   Spec
	Record events.ToolSpec
	schema *jsonschema.Schema
	what   string // "tool <name>", as errors name it
}

// Compile checks t's spec and compiles its schema. Errors wrap [ErrBadTool]
// and name the tool and what is wrong.
func Compile(t Tool) (*CompiledTool, error) {
	s := t.Spec()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %q: %s", ErrBadTool, s.Name, fmt.Sprintf(format, a...))
	}
	switch {
	case s.Name == "":
		return nil, fmt.Errorf("%w: a tool has no name", ErrBadTool)
	case !utf8.ValidString(s.Name) || !utf8.ValidString(s.Description):
		return nil, bad("name or description is not valid UTF-8")
	case !s.SideEffect.Valid():
		return nil, bad("unknown side-effect class %q (want one of read_only, local_mutation, remote_mutation, destructive)", s.SideEffect)
	case s.Timeout <= 0:
		return nil, bad("no timeout")
	case len(bytes.TrimSpace(s.Schema)) == 0:
		return nil, bad("no input schema")
	}
	canon, err := jsonform.PolicyJSON(s.Schema)
	if err != nil {
		return nil, bad("schema is not usable JSON: %v", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(canon))
	if err != nil {
		return nil, bad("schema: %v", err)
	}
	c := jsonschema.NewCompiler()
	url := "arbiter:tool/" + s.Name
	if err := c.AddResource(url, doc); err != nil {
		return nil, bad("schema: %v", err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, bad("schema does not compile: %v", err)
	}
	var fixed string
	if len(bytes.TrimSpace(s.Fixed)) > 0 {
		f, err := jsonform.PolicyJSON(s.Fixed)
		if err != nil {
			return nil, bad("fixed arguments are not usable JSON: %v", err)
		}
		if f[0] != '{' {
			return nil, bad("fixed arguments are not a JSON object")
		}
		fixed = string(f)
	}
	rec := events.ToolSpec{
		Name: s.Name, Description: s.Description, Schema: canon, SideEffect: s.SideEffect,
		TimeoutMS: s.Timeout.Milliseconds(), Terminal: s.Terminal, Pin: s.Pin, Fixed: fixed,
		Data: append([]string(nil), s.Data...), Tags: append([]string(nil), s.Tags...), Resource: s.Resource,
	}
	rec.Hash = SpecHash(rec)
	return &CompiledTool{Tool: t, Spec: s, Record: rec, schema: sch, what: "tool " + s.Name}, nil
}

// SpecHash is [events.HashToolSpec] for a spec already held to the JSON
// boundary (as every compiled tool's is), so it cannot fail.
func SpecHash(s events.ToolSpec) string {
	h, err := events.HashToolSpec(s)
	if err != nil {
		panic(err)
	}
	return h
}

var printer = message.NewPrinter(language.English)

// CheckArgs applies the driver's acceptance to raw arguments: the JSON boundary,
// then the schema. It returns the arguments in PolicyJSON form, or an
// *[ArgsError].
func (t *CompiledTool) CheckArgs(raw []byte) (json.RawMessage, error) {
	canon, err := jsonform.PolicyJSON(raw)
	if err != nil {
		return nil, &ArgsError{Tool: t.Spec.Name, Reason: err.Error(), Err: err}
	}
	inst, err := decodeCanonical(canon)
	if err != nil {
		return nil, &ArgsError{Tool: t.Spec.Name, Reason: err.Error(), Err: err}
	}
	if err := t.schema.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, &ArgsError{Tool: t.Spec.Name, Reason: err.Error()}
		}
		leaf := ve
		for len(leaf.Causes) > 0 {
			leaf = leaf.Causes[0]
		}
		ptr := ""
		if len(leaf.InstanceLocation) > 0 {
			ptr = "/" + strings.Join(leaf.InstanceLocation, "/")
		}
		return nil, &ArgsError{Tool: t.Spec.Name, Pointer: ptr, Reason: leaf.ErrorKind.LocalizedString(printer)}
	}
	return canon, nil
}

// CheckArgs compiles t and checks raw against it: what the driver would
// accept, for tests and tools outside a run.
func CheckArgs(t Tool, raw []byte) (json.RawMessage, error) {
	ct, err := Compile(t)
	if err != nil {
		return nil, err
	}
	return ct.CheckArgs(raw)
}
