package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/arbiter-run/arbiter/events"
)

// watchState is the state file of `arbiter watch`: --state as given, or for
// --durable NAME <data>/watch/NAME.json (the directory made if missing).
func watchState(data, durable, state string) (string, error) {
	switch {
	case durable == "":
		return state, nil
	case state != "":
		return "", usageError{"give --durable NAME or --state FILE, not both"}
	}
	if err := events.ValidRunID(durable); err != nil {
		return "", usageError{fmt.Sprintf("--durable %q: a name of letters, digits, '-' or '_'", durable)}
	}
	dir := filepath.Join(data, "watch")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("--durable %s: %w", durable, err)
	}
	return filepath.Join(dir, durable+".json"), nil
}
