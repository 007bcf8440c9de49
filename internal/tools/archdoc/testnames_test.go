package archdoc

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// cited finds the names of tests and benchmarks a document names:
// TestX, TestX/subtest (the subtest is not checked) and TestX_* (a prefix).
var cited = regexp.MustCompile(`\b((?:Test|Benchmark)[A-Z][A-Za-z0-9_]*)(\*)?`)

// declared finds the test and benchmark functions a _test.go file declares.
var declared = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark)[A-Z][A-Za-z0-9_]*)\(`)

// TestDocs_CiteOnlyTestsThatExist holds the documents to their promise that
// a claim names the test that proves it (docs/security.md: "A claim without
// a test is not made here"): every test or benchmark named in README.md,
// docs/ and docs/adr/ must be declared in a _test.go file of the module, and
// a name ending in "_*" must be the prefix of at least one. A test renamed
// or removed without its citation fails here.
func TestDocs_CiteOnlyTestsThatExist(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	var funcs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range declared.FindAllStringSubmatch(string(b), -1) {
			funcs = append(funcs, m[1])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(funcs) < 100 {
		t.Fatalf("found %d test functions under %s: not the module's root?", len(funcs), root)
	}
	slices.Sort(funcs)

	docs := []string{filepath.Join(root, "README.md")}
	for _, dir := range []string{"docs", filepath.Join("docs", "adr")} {
		m, err := filepath.Glob(filepath.Join(root, dir, "*.md"))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, m...)
	}
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range cited.FindAllStringSubmatch(string(b), -1) {
			name, prefix := m[1], m[2] == "*"
			checked++
			if prefix {
				i, _ := slices.BinarySearch(funcs, name)
				if i == len(funcs) || !strings.HasPrefix(funcs[i], name) {
					t.Errorf("%s cites %s*: no test starts with %s", filepath.Base(doc), name, name)
				}
				continue
			}
			if _, ok := slices.BinarySearch(funcs, name); !ok {
				t.Errorf("%s cites %s: no such test or benchmark in the module", filepath.Base(doc), name)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d citations in %d documents: the pattern finds too few", checked, len(docs))
	}
}
