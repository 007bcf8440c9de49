package replay

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/testkit"
)

func TestSpecHash_AgreesWithDriver(t *testing.T) {
	tools := []driver.Tool{
		testkit.NewLedger("read_file", events.ReadOnly, `{"type":"object","properties":{"path":{"type":"string","description":"a <path> & more"}}}`),
		testkit.NewLedger("finish", events.LocalMutation, testkit.AnyObject).Terminal(),
	}
	for _, tool := range tools {
		ct, err := driver.Compile(tool)
		if err != nil {
			t.Fatal(err)
		}
		got, err := specHash(ct.Record)
		if err != nil {
			t.Fatal(err)
		}
		if want := driver.SpecHash(ct.Record); got != want || got != ct.Record.Hash {
			t.Errorf("%s: got %s, want %s (driver.SpecHash, recorded %s)", ct.Record.Name, got, want, ct.Record.Hash)
		}
	}
}

func TestCompare_WidensAndNarrows(t *testing.T) {
	allow := Ruling{Outcome: "allow", Reason: "r"}
	deny := Ruling{Outcome: "deny", Reason: "r"}
	abort := Ruling{Outcome: "abort", Reason: "r"}
	fail := Ruling{Outcome: events.OutcomeError, Reason: "r"}
	ask := func(hash string) Ruling {
		return Ruling{Outcome: "require_approval", Reason: "r", Approval: &Approval{Kind: "k", Hash: hash}}
	}
	tests := []struct {
		name     string
		rec, rep Ruling
		grant    string
		verdict  Verdict
		change   Change
	}{
		{"same allow", allow, allow, "", Same, ""},
		{"same approval", ask("h1"), ask("h1"), "", Same, ""},
		{"approval now allowed", ask("h1"), allow, "", Different, Widens},
		{"denied now asks", deny, ask("h1"), "", Different, Widens},
		{"aborted now allowed", abort, allow, "", Different, Widens},
		{"allowed now asks", allow, ask("h1"), "", Different, Narrows},
		{"allowed now denied", allow, deny, "", Different, Narrows},
		{"asked now denied", ask("h1"), deny, "", Different, Narrows},
		{"allowed now errs", allow, fail, "", Different, Narrows},
		{"another approval", ask("h1"), ask("h2"), "", Different, Changed},
		{"another reason", allow, Ruling{Outcome: "allow", Reason: "s"}, "", Different, Changed},
		{"deny now aborts", deny, abort, "", Different, Changed},
		{"resume: consumed grant now allowed", ask("g"), allow, "g", Different, Changed},
		{"resume: allowed now asks the granted approval", allow, ask("g"), "g", Different, Changed},
		{"resume: allowed now asks another", allow, ask("h"), "g", Different, Narrows},
		{"resume: asked again now asks the granted one", ask("h"), ask("g"), "g", Different, Widens},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, c := compare(tt.rec, tt.rep, tt.grant)
			if v != tt.verdict || c != tt.change {
				t.Errorf("got %s %s, want %s %s", v, c, tt.verdict, tt.change)
			}
		})
	}
}

// The audit must never be able to run a tool: it imports nothing that
// holds one.
func TestReplay_ImportsNothingThatRunsTools(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"/driver", "/fleet", "/toolbox", "/scripted", "/testkit", "/cmd/"}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden {
				if strings.HasPrefix(path, "github.com/arbiter-run/arbiter") && strings.Contains(path, bad) {
					t.Errorf("%s imports %s", f, path)
				}
			}
		}
	}
}
