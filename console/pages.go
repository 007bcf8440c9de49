package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/visible"
	"github.com/arbiter-run/arbiter/projector"
)

// funcs are the templates' helpers. None returns template.HTML: whatever
// they produce is escaped as text.
var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12] + "…"
		}
		return s
	},
	"raw": func(b []byte) string { return string(b) },
	// nonASCII and ascii show a request that holds a character that can
	// pass for another (a Cyrillic "а" for a Latin "a") once more, with
	// every character outside ASCII escaped.
	"nonASCII": func(tool string, args []byte) bool { return visible.NonASCII(tool) || visible.NonASCII(string(args)) },
	"ascii":    visible.ASCII,
	"summary":  summary,
}

// render executes template name into a buffer first, so a failing template
// never sends half a page.
func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		http.Error(w, "render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	// The whole page, so no template or field can forget it: text the
	// model or a tool chose shows as what it is, never as a bidirectional
	// override or an invisible character that changes what the operator
	// reads (internal/visible; the page's own markup is ASCII).
	_, _ = io.WriteString(w, visible.String(buf.String()))
}

// fail answers err with the status it calls for, as text.
func (s *Server) fail(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrBadRequest), errors.Is(err, client.ErrBadFilter), errors.Is(err, approvals.ErrBadDecision):
		status = http.StatusBadRequest
	case errors.Is(err, events.ErrNoRun):
		status = http.StatusNotFound
	case errors.Is(err, ErrStale), errors.Is(err, ErrBroken):
		status = http.StatusConflict
	}
	http.Error(w, err.Error(), status)
}

func parseFilter(r *http.Request) (client.Filter, error) {
	q := r.URL.Query()
	f := client.Filter{Status: projector.Status(q.Get("status")), Agent: q.Get("agent"), Actor: q.Get("actor")}
	for _, p := range []struct {
		name string
		into *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := parseTime(v)
		if err != nil {
			return client.Filter{}, fmt.Errorf("%w: %s %q: want a time like 2026-12-01T15:04 or 2026-12-01T15:04:05Z", ErrBadRequest, p.name, v)
		}
		*p.into = t
	}
	return f, f.Validate()
}

func parseTime(v string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("not a time")
}

type runsPage struct {
	Filter   client.Filter
	Since    string
	Until    string
	Page     client.Page
	NextURL  string
	Statuses []projector.Status
}

func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	page, err := s.List(r.Context(), f, r.URL.Query().Get("after"))
	if err != nil {
		s.fail(w, err)
		return
	}
	data := runsPage{Filter: f, Since: r.URL.Query().Get("since"), Until: r.URL.Query().Get("until"), Page: page,
		Statuses: []projector.Status{projector.Running, projector.Waiting, projector.Completed, projector.Failed, projector.Cancelled}}
	if page.Next != "" {
		q := r.URL.Query()
		q.Set("after", page.Next)
		data.NextURL = s.base + "?" + q.Encode()
	}
	s.render(w, http.StatusOK, "runs.html", data)
}

// traceLine is one event of a run as the trace shows it.
type traceLine struct {
	Seq       uint64
	StreamSeq uint64
	Time      time.Time
	Kind      events.Kind
	Summary   string
	Hash      string
}

// signing is what a decision's signature covers, shown before the click.
type signing struct {
	Domain, Run, Approval, Hash, Operator string
}

type runPage struct {
	Run       string
	View      projector.View
	Err       error
	Trace     []traceLine
	Tail      events.Tail
	Published string
	Operator  string
	CSRF      string
	Pending   *projector.Approval
	Sign      signing
}

func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) {
	run := r.PathValue("run")
	if err := events.ValidRunID(run); err != nil {
		s.fail(w, fmt.Errorf("%w: %w", ErrBadRequest, err))
		return
	}
	v, recs, err := s.client.Read(r.Context(), run)
	if err != nil && !errors.Is(err, ErrBroken) {
		s.fail(w, err)
		return
	}
	data := runPage{Run: run, View: v, Err: err, Operator: s.operator, CSRF: s.csrf}
	if n, err := strconv.ParseUint(r.URL.Query().Get("published"), 10, 64); err == nil {
		data.Published = strconv.FormatUint(n, 10)
	}
	for _, rec := range recs {
		data.Trace = append(data.Trace, traceLine{Seq: rec.Event.Seq, StreamSeq: rec.StreamSeq, Time: rec.Event.Time, Kind: rec.Event.Kind, Summary: summary(rec.Event), Hash: events.Hash(rec.Data)})
		data.Tail = rec.Tail()
	}
	if err == nil {
		if a := v.PendingApproval(); a != nil && a.State == projector.Pending && v.Run.Status == projector.Waiting {
			data.Pending = a
			data.Sign = signing{Domain: "arbiter.decision.v1", Run: run, Approval: a.ID, Hash: a.Hash, Operator: s.operator}
		}
	}
	s.render(w, http.StatusOK, "run.html", data)
}

type approvalsPage struct {
	Pending []Pending
	Err     error
	CSRF    string
}

func (s *Server) handleApprovals(w http.ResponseWriter, r *http.Request) {
	list, _, _, err := s.pending.snapshot()
	s.render(w, http.StatusOK, "approvals.html", approvalsPage{Pending: list, Err: err, CSRF: s.csrf})
}

// handleApprovalsLive streams the waiting approvals as server-sent events:
// one "pending" event with the whole list (JSON) now and whenever it
// changes.
// The page's script renders it with textContent, never as markup.
func (s *Server) handleApprovalsLive(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	var sent []byte
	for {
		list, _, changed, _ := s.pending.snapshot()
		shown := make([]Pending, len(list))
		for i, p := range list {
			shown[i] = p.visible()
		}
		b, err := json.Marshal(shown)
		if err != nil {
			return
		}
		// The same list is not sent twice (the feed's first look, say).
		if sent == nil || !bytes.Equal(b, sent) {
			sent = b
			fmt.Fprintf(w, "event: pending\ndata: %s\n\n", b)
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		}
	}
}

// handleRunLive streams one "tail" event with the run's event count now
// and whenever it changes, for the run page to reload itself.
func (s *Server) handleRunLive(w http.ResponseWriter, r *http.Request) {
	run := r.PathValue("run")
	if err := events.ValidRunID(run); err != nil {
		s.fail(w, fmt.Errorf("%w: %w", ErrBadRequest, err))
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	var last uint64
	for {
		tail, err := s.cfg.Log.Tail(r.Context(), run)
		if err == nil && tail.Count != last {
			last = tail.Count
			fmt.Fprintf(w, "event: tail\ndata: %d\n\n", tail.Count)
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-t.C:
		}
	}
}

// handleDecide signs the operator's grant or denial with the console's
// key and publishes it, then nudges the fleet. It refuses a decision on an
// approval that is no longer pending, or whose hash is not the one the
// page showed (the operator signs only what they saw).
func (s *Server) handleDecide(w http.ResponseWriter, r *http.Request) {
	run, id := r.PathValue("run"), r.PathValue("approval")
	seq, err := s.Decide(r.Context(), run, id, r.PostFormValue("decision"), r.PostFormValue("hash"), r.PostFormValue("reason"))
	if err != nil {
		s.fail(w, err)
		return
	}
	http.Redirect(w, r, s.base+"runs/"+run+"?published="+strconv.FormatUint(seq, 10), http.StatusSeeOther)
}

// Decide signs decision (grant or deny) on approval id of run, which must
// be pending with hash shown, publishes it and nudges the fleet. It
// returns the decision's sequence in the decisions stream.
//
// Errors: [ErrBadRequest] for a malformed run id or decision, [ErrStale]
// for an approval that is not pending or whose hash is not shown (nothing
// is signed), [ErrBroken] for a run whose events do not verify, or the
// publish's error.
func (s *Server) Decide(ctx context.Context, run, id, decision, shown, reason string) (uint64, error) {
	if err := events.ValidRunID(run); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if decision != events.DecisionGrant && decision != events.DecisionDeny {
		return 0, fmt.Errorf("%w: decision %q (want grant or deny)", ErrBadRequest, decision)
	}
	if shown == "" {
		return 0, fmt.Errorf("%w: the page showed no approval hash: reload and look again; nothing signed", ErrStale)
	}
	// A missed nudge only delays the decision to the fleet's next look at
	// the run, so it is not an error to the operator (Decided.Unnudged).
	d, err := s.client.Decide(ctx, s.cfg.Key, run, id, client.Decision{Decision: decision, Reason: reason, Hash: shown, At: s.cfg.Now()})
	switch {
	case errors.Is(err, approvals.ErrNoApproval), errors.Is(err, approvals.ErrNotPending), errors.Is(err, approvals.ErrWrongHash):
		return 0, fmt.Errorf("%w: %w", ErrStale, err)
	case err != nil:
		return 0, err
	}
	return d.Seq, nil
}

// summary is one event in a line of text.
func summary(e events.Event) string {
	switch e.Kind {
	case events.RunCreated:
		b, _ := events.DecodeBody[events.RunCreatedBody](e)
		names := make([]string, len(b.Tools))
		for i, t := range b.Tools {
			names[i] = t.Name
		}
		return fmt.Sprintf("agent %s, tools %s", b.Agent, strings.Join(names, ", "))
	case events.StepDecided:
		b, _ := events.DecodeBody[events.StepDecidedBody](e)
		s := fmt.Sprintf("step %d: %s %s", b.Step, b.Tool, clip(string(b.RawArgs()), 120))
		if b.Policy != nil {
			s += fmt.Sprintf(": %s by policy %s (%s)", b.Policy.Outcome, b.Policy.PolicyID, b.Policy.Reason)
		}
		return s
	case events.StepPolicy, events.ApprovalRequested:
		b, _ := events.DecodeBody[events.PolicyBody](e)
		s := fmt.Sprintf("step %d: %s by policy %s (%s)", b.Step, b.Outcome, b.PolicyID, b.Reason)
		if b.Consumes != "" {
			s += ", consuming grant " + b.Consumes
		}
		if b.Approval != nil {
			s += fmt.Sprintf(", approval %s (%s)", b.Approval.ID, b.Approval.Kind)
		}
		return s
	case events.StepObserved:
		b, _ := events.DecodeBody[events.ObservedBody](e)
		return fmt.Sprintf("step %d: %s: %s", b.Step, b.Kind, clip(b.Content, 120))
	case events.StepInterrupted:
		b, _ := events.DecodeBody[events.InterruptedBody](e)
		return fmt.Sprintf("step %d: %s", b.Step, b.Resolution)
	case events.ApprovalGranted, events.ApprovalDenied:
		b, _ := events.DecodeBody[events.DecisionBody](e)
		return fmt.Sprintf("approval %s %s by %s (%s)", b.Approval, b.Decision, b.Operator, b.Reason)
	case events.ApprovalRefused:
		b, _ := events.DecodeBody[events.RefusedBody](e)
		return fmt.Sprintf("approval %s: refused: %s", b.Approval, b.Reason)
	case events.ApprovalExpired:
		b, _ := events.DecodeBody[events.ExpiredBody](e)
		return "approval " + b.Approval + " expired"
	case events.RunFinished, events.RunFailed, events.RunCancelled:
		b, _ := events.DecodeBody[events.EndBody](e)
		if o := b.Observation; o != nil {
			return fmt.Sprintf("%s with step %d's %s: %s", b.Reason, o.Step, o.Kind, clip(b.Result, 120))
		}
		return strings.TrimSpace(fmt.Sprintf("%s %s %s", b.Reason, b.Detail, clip(b.Result, 120)))
	}
	return clip(string(e.Body), 120)
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
