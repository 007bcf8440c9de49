// Package archdoc holds docs/architecture.md's layer table to the code: its
// "imports" column must be what `go list` says each package imports from
// this module (internal/ packages left out), and every package outside
// cmd/, internal/ and faulttest/ must have a row.
package archdoc

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/arbiter-run/arbiter/"

// imports returns, for each package of the module, the module packages it
// imports (not its tests), as the table names them ("events", "rules").
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	got := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		pkg, ok := strings.CutPrefix(f[0], module)
		if !ok {
			continue
		}
		var deps []string
		for _, d := range f[1:] {
			if d, ok := strings.CutPrefix(d, module); ok && !strings.HasPrefix(d, "internal/") {
				deps = append(deps, d)
			}
		}
		slices.Sort(deps)
		got[pkg] = deps
	}
	return got
}

// rows returns the layer table's rows: package cell → imports cell.
func rows(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		out[strings.TrimSpace(cells[1])] = strings.TrimSpace(cells[3])
	}
	return out
}

func TestArchitecture_ImportTableMatchesGoList(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	deps := imports(t, root)
	table := rows(t, filepath.Join(root, "docs", "architecture.md"))
	covered := map[string]bool{}
	for cell, col := range table {
		var pkgs []string
		for _, p := range strings.Split(cell, ",") {
			pkgs = append(pkgs, strings.TrimSuffix(strings.Trim(strings.TrimSpace(p), "`"), "/"))
		}
		for _, p := range pkgs {
			covered[p] = true
		}
		if col == "anything" {
			continue
		}
		var want []string
		for _, p := range pkgs {
			d, ok := deps[p]
			if !ok {
				t.Errorf("row %s: no package %s in the module", cell, p)
			}
			for _, x := range d {
				if !slices.Contains(want, x) {
					want = append(want, x)
				}
			}
		}
		slices.Sort(want)
		wantCol := strings.Join(want, ", ")
		if wantCol == "" {
			wantCol = "—"
		}
		var have []string
		for _, x := range strings.Split(col, ",") {
			if x = strings.TrimSpace(x); x != "" && x != "—" {
				have = append(have, x)
			}
		}
		slices.Sort(have)
		haveCol := strings.Join(have, ", ")
		if haveCol == "" {
			haveCol = "—"
		}
		if haveCol != wantCol {
			t.Errorf("docs/architecture.md row %s: imports %q, go list says %q", cell, col, wantCol)
		}
	}
	for p := range deps {
		if strings.HasPrefix(p, "cmd/") || strings.HasPrefix(p, "internal/") || p == "faulttest" || covered[p] {
			continue
		}
		t.Errorf("docs/architecture.md has no row for package %s", p)
	}
}
