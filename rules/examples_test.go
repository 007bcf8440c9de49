package rules_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/rules"
)

// TestExamples_CaseTablesPass runs every example policy of
// examples/policies/ against its case table: what CI holds the seed
// examples to.
func TestExamples_CaseTablesPass(t *testing.T) {
	files, err := filepath.Glob("../examples/policies/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, ".cases.yaml") {
			continue
		}
		n++
		t.Run(filepath.Base(f), func(t *testing.T) {
			p, err := rules.Load(f)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			cases, err := rules.LoadCases(strings.TrimSuffix(f, ".yaml") + ".cases.yaml")
			if err != nil {
				t.Fatalf("cases: %v", err)
			}
			if len(cases.Cases) == 0 {
				t.Fatal("the case table has no cases")
			}
			res, err := rules.RunCases(context.Background(), p, cases)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Problem != "" {
					t.Errorf("line %d %q: %s", r.Line, r.Name, r.Problem)
				}
			}
		})
	}
	if n < 7 {
		t.Errorf("%d example policies, want the 7 of the seeds", n)
	}
}
