package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/arbiter-run/arbiter/replay"
	"golang.org/x/term"
)

// printer writes results as they come: a table for people, or JSON lines.
type printer struct {
	w       io.Writer
	tw      *tabwriter.Writer
	json    *json.Encoder
	all     bool
	rows    int
	headed  bool
	others  []string // policy ids met on evaluations recorded by another policy
	skipped int      // rows not listed (same, valid)
}

// flushEvery bounds what the table holds before it is written: a long
// stream's report must not sit in memory, so columns align per block.
const flushEvery = 200

func newPrinter(w io.Writer, jsonOut, all bool) *printer {
	p := &printer{w: w, all: all}
	if jsonOut {
		p.json = json.NewEncoder(w)
		p.json.SetEscapeHTML(false)
	} else {
		p.tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	}
	return p
}

func (p *printer) result(r replay.Result) error {
	if r.Cause == replay.OtherPolicy && len(p.others) < 10 && !slices.Contains(p.others, r.PolicyID) {
		p.others = append(p.others, r.PolicyID)
	}
	if p.json != nil {
		return p.encode(struct {
			Type string `json:"type"`
			replay.Result
		}{"evaluation", r})
	}
	if r.Verdict == replay.Same && !p.all {
		p.skipped++
		return nil
	}
	replayed := "-"
	if r.Replayed != nil {
		replayed = outcome(*r.Replayed)
	}
	verdict := string(r.Verdict)
	if r.Unconfirmed {
		verdict += " (unconfirmed)"
	}
	return p.row(r.Run, fmt.Sprint(r.Step), r.Tool, outcome(r.Recorded), replayed, verdict, detail(r))
}

func (p *printer) grant(g replay.GrantResult) error {
	if p.json != nil {
		return p.encode(struct {
			Type string `json:"type"`
			replay.GrantResult
		}{"decision", g})
	}
	if g.Verdict == replay.GrantValid && !p.all {
		p.skipped++
		return nil
	}
	step := "-"
	if g.Step > 0 {
		step = fmt.Sprint(g.Step)
	}
	return p.row(g.Run, step, g.Tool, fmt.Sprintf("%s by %.10s", g.Decision, g.Operator), "-", string(g.Verdict)+" "+g.Decision, g.Reason)
}

// budget prints one budget check of a model agent: only those that do not
// hold, unless --all.
func (p *printer) budget(b replay.BudgetResult) error {
	if p.json != nil {
		return p.encode(struct {
			Type string `json:"type"`
			replay.BudgetResult
		}{"budget", b})
	}
	if b.Verdict == replay.Same && b.GrantProblem == "" && !p.all {
		p.skipped++
		return nil
	}
	reason := b.Reason
	if b.GrantProblem != "" {
		reason = strings.TrimSpace(reason + " grant " + b.Grant + " does not verify: " + b.GrantProblem)
	}
	return p.row(b.Run, "-", "-", fmt.Sprintf("%s model call %d attempt %d", b.Kind, b.Call, b.Attempt), "-", "budget "+string(b.Verdict), reason)
}

func (p *printer) encode(v any) error {
	if err := p.json.Encode(v); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

func (p *printer) row(cols ...string) error {
	if !p.headed {
		fmt.Fprintln(p.tw, "RUN\tSTEP\tTOOL\tRECORDED\tREPLAYED\tVERDICT\tCHANGE/REASON")
		p.headed = true
	}
	for i, c := range cols {
		cols[i] = strings.NewReplacer("\t", " ", "\n", " ").Replace(c)
	}
	fmt.Fprintln(p.tw, strings.Join(cols, "\t"))
	p.rows++
	if p.rows%flushEvery == 0 {
		return p.flush()
	}
	return nil
}

func (p *printer) flush() error {
	if p.tw == nil {
		return nil
	}
	if err := p.tw.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// outcome is a decision in a few words.
func outcome(d replay.Ruling) string {
	if d.Approval != nil {
		return fmt.Sprintf("%s(%s)", d.Outcome, d.Approval.Kind)
	}
	return string(d.Outcome)
}

// detail says what changed, or why nothing could be compared.
func detail(r replay.Result) string {
	var s string
	switch {
	case r.Verdict == replay.NotCheckable:
		s = r.Reason
	case r.Verdict == replay.Different && r.Replayed != nil:
		s = string(r.Change)
		rec, rep := r.Recorded, *r.Replayed
		switch {
		case rec.Outcome != rep.Outcome:
			s += fmt.Sprintf(": %q", rep.Reason)
		case rec.Reason != rep.Reason:
			s += fmt.Sprintf(": reason %q -> %q", rec.Reason, rep.Reason)
		case rec.Approval != nil && rep.Approval != nil:
			s += fmt.Sprintf(": approval %.12s -> %.12s (kind, capability or presentation)", rec.Approval.Hash, rep.Approval.Hash)
		}
	}
	if r.GrantProblem != "" {
		s += "; RAN ON A GRANT THAT DOES NOT VERIFY: " + r.GrantProblem
	}
	return s
}

// summary ends the report.
func (p *printer) summary(s replay.Summary, id, against string, code int) {
	if p.json != nil {
		_ = p.encode(struct {
			Type     string `json:"type"`
			PolicyID string `json:"policy_id"`
			Baseline string `json:"baseline"`
			Exit     int    `json:"exit"`
			replay.Summary
		}{"summary", id, against, code, s})
		return
	}
	_ = p.flush()
	w := p.w
	if p.rows > 0 {
		fmt.Fprintln(w)
	}
	if id == against {
		fmt.Fprintf(w, "checked against policy %q\n", id)
	} else {
		fmt.Fprintf(w, "checked policy %q against the evaluations recorded by %q\n", id, against)
	}
	fmt.Fprintf(w, "read %d events of %s; %d evaluations: %d same, %d different (%d widen, %d narrow, %d changed), %d not checkable\n",
		s.Events, plural(s.Runs, "run"), s.Evaluations, s.Same, s.Different, s.Widens, s.Narrows, s.Changed, s.NotCheckable)
	fmt.Fprintf(w, "operator decisions: %d (%d valid, %d invalid, %d not acted on, %d unverified)\n",
		s.Grants, s.GrantsValid, s.GrantsInvalid, s.GrantsNotActed, s.GrantsUnverified)
	if s.Budgets > 0 {
		fmt.Fprintf(w, "model budget checks: %d (%d same, %d different)\n", s.Budgets, s.BudgetsSame, s.BudgetsDifferent)
	}
	if s.GrantsUnverified > 0 {
		fmt.Fprintln(w, "  decisions were not verified: give the operators' keys with --operator")
	}
	if s.ConsumedInvalid > 0 {
		fmt.Fprintf(w, "  %d calls ran on a grant that does not verify\n", s.ConsumedInvalid)
	}
	if s.Tampered == 0 {
		fmt.Fprintln(w, "history: every hash chain read is intact")
	} else {
		fmt.Fprintf(w, "history: TAMPERED in %s\n", plural(s.Tampered, "run"))
		for _, b := range s.Breaks {
			fmt.Fprintf(w, "  run %s at stream seq %d: %s\n", b.Run, b.StreamSeq, b.Reason)
		}
	}
	if len(p.others) > 0 {
		fmt.Fprintf(w, "evaluations recorded by other policies (compare with one: --baseline ID): %s\n", quoteAll(p.others))
	}
	if p.skipped > 0 {
		fmt.Fprintf(w, "%d rows that re-checked the same or verified are not listed (--all lists them)\n", p.skipped)
	}
	verdict := "SAME"
	if code != exitSame {
		verdict = "DIFFERENT"
	}
	fmt.Fprintf(w, "result: %s (exit %d)\n", verdict, code)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// progress is a one-line progress indicator on a terminal.
type progress struct {
	w     io.Writer
	start time.Time
	last  time.Time
	shown bool
}

// newProgress returns a progress line on w, or nil when w is not a
// terminal (a progress line would only litter a file or a pipe).
func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return &progress{w: w, start: time.Now()}
}

func (p *progress) update(pr replay.Progress) {
	now := time.Now()
	if now.Sub(p.last) < 200*time.Millisecond {
		return
	}
	p.last = now
	pct := 100.0
	if pr.Last > 0 {
		pct = 100 * float64(pr.Seq) / float64(pr.Last)
	}
	rate := float64(pr.Events) / max(now.Sub(p.start).Seconds(), 1e-3)
	fmt.Fprintf(p.w, "\r\033[Kreplay: shard %d/%d %5.1f%% (seq %d of %d)  %d events, %d evaluations  %.0f events/s",
		pr.Shard+1, pr.Shards, pct, pr.Seq, pr.Last, pr.Events, pr.Evaluations, rate)
	p.shown = true
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
