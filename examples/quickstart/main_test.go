package main

import (
	"context"
	"flag"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/testkit"
)

var update = flag.Bool("update", false, "rewrite testdata/output.golden")

// TestQuickstart_BuildsRunsAndSaysWhatHappened builds the program as a user
// would (go build), runs it, and holds its whole output: the run waits for
// the operator, the grant lets the refund run once, the run ends with the
// tool's answer, and its events say so in order.
func TestQuickstart_BuildsRunsAndSaysWhatHappened(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "quickstart")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin).Output()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	testkit.Golden(t, "output.golden", string(out), *update)
}
