package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/arbiter-run/arbiter/jsonform"
)

// ErrSchema marks a tool's input schema the package will not offer.
var ErrSchema = errors.New("unusable input schema")

// selfContained refuses a schema that refers outside itself: a $ref,
// $dynamicRef or $recursiveRef that is not a fragment of the same document
// ("#…"), or a $schema that is not a json-schema.org meta-schema. The schema
// compiler would otherwise try to load the reference (a local file, say),
// and what the tool accepts would not be what was pinned.
func selfContained(schema []byte) error {
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: %v", ErrSchema, err)
	}
	return walkRefs(v, "")
}

func walkRefs(v any, at string) error {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			s, isString := x[k].(string)
			switch {
			case isString && (k == "$ref" || k == "$dynamicRef" || k == "$recursiveRef") && !strings.HasPrefix(s, "#"):
				return fmt.Errorf("%w: %s/%s refers outside the schema (%q)", ErrSchema, at, k, s)
			case isString && k == "$schema" && !metaSchema(s):
				return fmt.Errorf("%w: %s/$schema %q is not a json-schema.org meta-schema", ErrSchema, at, s)
			}
			if err := walkRefs(x[k], at+"/"+k); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := walkRefs(e, fmt.Sprintf("%s/%d", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func metaSchema(s string) bool {
	return strings.HasPrefix(s, "http://json-schema.org/") || strings.HasPrefix(s, "https://json-schema.org/")
}

// modelSchema is schema without the fixed arguments: removed from its
// top-level properties and required list. Every fixed name must be a
// property of schema.
func modelSchema(schema []byte, fixed []byte) ([]byte, error) {
	if len(fixed) == 0 {
		return schema, nil
	}
	var s map[string]json.RawMessage
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("%w: not a JSON object: %v", ErrSchema, err)
	}
	var props map[string]json.RawMessage
	if err := json.Unmarshal(s["properties"], &props); err != nil || props == nil {
		return nil, fmt.Errorf("%w: no properties to fix arguments in", ErrSchema)
	}
	var f map[string]json.RawMessage
	if err := json.Unmarshal(fixed, &f); err != nil {
		return nil, err
	}
	var required []string
	if r, ok := s["required"]; ok {
		if err := json.Unmarshal(r, &required); err != nil {
			return nil, fmt.Errorf("%w: required is not a list of names: %v", ErrSchema, err)
		}
	}
	for _, name := range sortedKeys(f) {
		if _, ok := props[name]; !ok {
			return nil, fmt.Errorf("%w: fixed argument %q is not a property of the schema (properties: %s)", ErrSchema, name, strings.Join(sortedKeys(props), ", "))
		}
		delete(props, name)
		required = slices.DeleteFunc(required, func(r string) bool { return r == name })
	}
	var err error
	if s["properties"], err = json.Marshal(props); err != nil {
		return nil, err
	}
	if _, ok := s["required"]; ok {
		if s["required"], err = json.Marshal(required); err != nil {
			return nil, err
		}
	}
	out, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return jsonform.PolicyJSON(out)
}

// ErrFixedArgument is returned for a call whose arguments name an argument
// the operator fixed.
var ErrFixedArgument = errors.New("argument is fixed by the operator")

// mergeFixed adds the fixed arguments to args (a JSON object in PolicyJSON
// form). An argument the model set that is fixed is refused, never silently
// overridden.
func mergeFixed(args, fixed []byte) ([]byte, error) {
	if len(fixed) == 0 {
		return args, nil
	}
	var a, f map[string]json.RawMessage
	if err := json.Unmarshal(args, &a); err != nil {
		return nil, fmt.Errorf("arguments are not a JSON object: %w", err)
	}
	if err := json.Unmarshal(fixed, &f); err != nil {
		return nil, err
	}
	if a == nil {
		a = map[string]json.RawMessage{}
	}
	for _, k := range sortedKeys(f) {
		if _, set := a[k]; set {
			return nil, fmt.Errorf("%q: %w", k, ErrFixedArgument)
		}
		a[k] = f[k]
	}
	return json.Marshal(a)
}

// marshalConfigValue encodes a value decoded from YAML as JSON in
// PolicyJSON form.
func marshalConfigValue(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("not representable as JSON: %v", err)
	}
	return jsonform.PolicyJSON(b)
}
