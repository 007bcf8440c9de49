package mcp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbiter-run/arbiter/jsonform"
)

// LockVersion is the lock file format this package reads and writes.
const LockVersion = 1

// Lock pins the tools of each server as they were reviewed: the file
// "arbiter mcp pin" writes, reviewed like code.
type Lock struct {
	Version int `json:"version"`
	// Servers maps a server's name to its pinned tools, by the server's
	// name for each.
	Servers map[string]map[string]Pin `json:"servers"`
}

// Pin is one tool as reviewed. Hash covers the tool's name, description,
// input schema and annotations; the other fields let a change be named.
type Pin struct {
	Hash string `json:"hash"`
	// Description is the text the model is shown, kept whole so a review
	// (and a diff of the lock file) reads it.
	Description string `json:"description"`
	// Schema and Annotations are the SHA-256 of each in PolicyJSON form.
	Schema      string `json:"input_schema"`
	Annotations string `json:"annotations"`
}

// ErrLock marks a lock file the package cannot use.
var ErrLock = errors.New("unusable lock file")

// ReadLock reads the lock file at path. A file that does not exist is an
// error wrapping [os.ErrNotExist]; one that is not a lock of this version
// wraps [ErrLock].
func ReadLock(path string) (Lock, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Lock{}, fmt.Errorf("read lock: %w", err)
	}
	return parseLock(path, b)
}

// parseLock decodes the lock file path holds, b.
func parseLock(path string, b []byte) (Lock, error) {
	var l Lock
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Lock{}, fmt.Errorf("%w %s: %v", ErrLock, path, err)
	}
	if l.Version != LockVersion {
		return Lock{}, fmt.Errorf("%w %s: version %d (this worker reads version %d)", ErrLock, path, l.Version, LockVersion)
	}
	for server, tools := range l.Servers {
		for name, p := range tools {
			if len(p.Hash) != 64 {
				return Lock{}, fmt.Errorf("%w %s: servers.%s.%s.hash %q is not a SHA-256", ErrLock, path, server, name, p.Hash)
			}
		}
	}
	return l, nil
}

// WriteLock writes l to path (through a temporary file, so a reader never
// sees half a lock), indented and with sorted keys so it diffs well.
func WriteLock(path string, l Lock) error {
	l.Version = LockVersion
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("write lock: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".lock-*")
	if err != nil {
		return fmt.Errorf("write lock: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write lock: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write lock: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write lock: %w", err)
	}
	return nil
}

// annotationsForm is what of a tool's annotations is pinned, with every
// hint explicit, so the hash does not depend on how a library encodes the
// defaults.
type annotationsForm struct {
	Destructive *bool  `json:"destructive"`
	Idempotent  bool   `json:"idempotent"`
	OpenWorld   *bool  `json:"open_world"`
	ReadOnly    bool   `json:"read_only"`
	Title       string `json:"title"`
}

// pinOf computes the pin of a tool as the server lists it.
func pinOf(t *sdk.Tool) (Pin, error) {
	schema, err := toolSchema(t)
	if err != nil {
		return Pin{}, err
	}
	var ann *annotationsForm
	if a := t.Annotations; a != nil {
		ann = &annotationsForm{Destructive: a.DestructiveHint, Idempotent: a.IdempotentHint, OpenWorld: a.OpenWorldHint, ReadOnly: a.ReadOnlyHint, Title: a.Title}
	}
	annJSON, err := jsonform.Marshal(ann)
	if err != nil {
		return Pin{}, fmt.Errorf("pin tool %s: annotations: %w", t.Name, err)
	}
	all, err := jsonform.Marshal(struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"input_schema"`
		Annotations json.RawMessage `json:"annotations"`
	}{t.Name, t.Description, schema, annJSON})
	if err != nil {
		return Pin{}, fmt.Errorf("pin tool %s: %w", t.Name, err)
	}
	return Pin{Hash: sum(all), Description: t.Description, Schema: sum(schema), Annotations: sum(annJSON)}, nil
}

// toolSchema is t's input schema in PolicyJSON form.
func toolSchema(t *sdk.Tool) ([]byte, error) {
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w: %v", t.Name, ErrSchema, err)
	}
	canon, err := jsonform.PolicyJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w: %v", t.Name, ErrSchema, err)
	}
	return canon, nil
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// changes names what differs between a pinned tool and the tool now: any of
// "description", "input schema", "annotations"; empty when they agree.
func changes(pinned, now Pin) string {
	var out []string
	if pinned.Description != now.Description {
		out = append(out, "description")
	}
	if pinned.Schema != now.Schema {
		out = append(out, "input schema")
	}
	if pinned.Annotations != now.Annotations {
		out = append(out, "annotations")
	}
	if len(out) == 0 && pinned.Hash != now.Hash {
		out = append(out, "hash")
	}
	return strings.Join(out, ", ")
}
