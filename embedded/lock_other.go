//go:build !unix

package embedded

import "os"

// lockStore does nothing where flock(2) is not available: there, keeping one
// server per store is the operator's job.
func lockStore(string) (*os.File, error) { return nil, nil }
