package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/testkit"
)

func TestShadow_ReportsAndExitsOnWidening(t *testing.T) {
	e := newOpsEnv(t)
	cand, err := rules.Parse("c.yaml", []byte("version: 1\ndefault: allow\npolicies: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := driver.New(driver.Config{
		Log: e.log, Policy: policy.WithID(policy.DefaultSideEffects(), "se"), Shadow: cand,
		Tools: []driver.Tool{e.send, testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()},
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.Create(t.Context(), "shadowed", "script", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Drive(t.Context(), r, e.agent(`{}`)); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"shadowed"}, {"--since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}} {
		var out bytes.Buffer
		err := runShadow(t.Context(), e.args(args...), &out)
		if !errors.Is(err, errShadowWidens) {
			t.Errorf("shadow %v = %v, want errShadowWidens", args, err)
		}
		if !strings.Contains(out.String(), "widens run shadowed step 1 send: require_approval (recorded) → allow (shadow)") ||
			!strings.Contains(out.String(), "1 evaluations, 1 shadowed: 0 same, 1 widen") {
			t.Errorf("shadow %v printed:\n%s", args, out.String())
		}
	}
	var ue usageError
	if err := runShadow(t.Context(), e.args("--since", "yesterday"), &bytes.Buffer{}); !errors.As(err, &ue) {
		t.Errorf("shadow --since yesterday = %v, want a usage error", err)
	}
}
