package console_test

import (
	"bufio"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/console"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/visible"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nkeys"
)

func TestConsole_TokenRequired(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.pause(t, "run-a", `{"note":"hi"}`)
	plain := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/", "/runs/run-a", "/approvals", "/approvals/live", "/static/console.js", "/?token=wrong"} {
		code, body := get(t, plain, e.base+path)
		if code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, code)
		}
		if strings.Contains(body, "run-a") {
			t.Errorf("GET %s without the token shows the run:\n%s", path, body)
		}
	}
	// The printed URL sets the cookie and drops the token from the address.
	c := e.client(t)
	// The cookie is the session's, not the printed token, and is for the
	// console's path only: a browser keeps cookies per host, not per port,
	// and would otherwise hand it to every other server on 127.0.0.1 it
	// visits.
	u, _ := url.Parse(e.base + "/")
	cookies := c.Jar.Cookies(u)
	if len(cookies) != 1 || cookies[0].Value == e.console.Token() {
		t.Errorf("cookies held: %+v, want one session cookie that is not the printed token", cookies)
	}
	code, body := get(t, c, e.base+"/runs/run-a")
	if code != http.StatusOK || !strings.Contains(body, "WAITING_FOR_APPROVAL") {
		t.Errorf("GET the run with the cookie: %d\n%s", code, body)
	}
	// The printed URL opens the console once: the browser that opened it
	// keeps it in its history, where anyone reading it would otherwise find
	// a working credential.
	for _, path := range []string{"/", "/runs/run-a"} {
		code, body := get(t, plain, e.base+path+"?token="+url.QueryEscape(e.console.Token()))
		if code != http.StatusUnauthorized || !strings.Contains(body, "opened already") || strings.Contains(body, "WAITING") {
			t.Errorf("the printed URL opened again at %s: %d %q, want 401 saying it was opened already", path, code, body)
		}
	}
	if code, _ := get(t, c, e.base+"/runs/run-a"); code != http.StatusOK {
		t.Errorf("the browser that opened the console, after the URL was tried again: %d, want 200", code)
	}
	// Nothing is served outside the console's path, token or not.
	for _, path := range []string{"/", "/runs/run-a", "/approvals", "/c/" + strings.Repeat("A", 22) + "/runs/run-a"} {
		if code, body := get(t, plain, e.srv.URL+path+"?token="+url.QueryEscape(e.console.Token())); code != http.StatusNotFound || strings.Contains(body, "run-a") {
			t.Errorf("GET %s outside the console's path: %d, want 404 showing nothing", path, code)
		}
	}
	r, err := c.Get(e.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if got := r.Header.Get("Content-Security-Policy"); !strings.Contains(got, "script-src 'self'") || !strings.Contains(got, "default-src 'none'") || strings.Contains(got, "unsafe") {
		t.Errorf("CSP %q, want default-src 'none' and script-src 'self' without unsafe-*", got)
	}
}

func TestConsole_DecisionNeedsCSRF(t *testing.T) {
	e := newEnv(t, envConfig{})
	a := e.pause(t, "run-a", `{"note":"hi"}`)
	c := e.client(t)
	_, page := get(t, c, e.base+"/runs/run-a")
	token := csrf(t, page)
	for name, form := range map[string]url.Values{
		"no csrf":    {"decision": {"grant"}, "hash": {a.Hash}},
		"wrong csrf": {"decision": {"grant"}, "hash": {a.Hash}, "csrf": {token + "x"}},
	} {
		if resp := decide(t, c, e.base, "run-a", a.ID, form); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %s, want 403", name, resp.Status)
		}
	}
	// A cross-site request is refused even with the token.
	req, _ := http.NewRequest(http.MethodPost, e.base+"/runs/run-a/approvals/"+a.ID, strings.NewReader(url.Values{"decision": {"grant"}, "hash": {a.Hash}, "csrf": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site post: %s, want 403", resp.Status)
	}
	// A form too large to be a decision is refused before it is read.
	huge := url.Values{"decision": {"grant"}, "hash": {a.Hash}, "csrf": {token}, "reason": {strings.Repeat("x", 100<<10)}}
	if resp := decide(t, c, e.base, "run-a", a.ID, huge); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a 100 KiB form: %s, want 403", resp.Status)
	}
	if got := e.published(t, "run-a"); len(got) != 0 {
		t.Fatalf("%d decisions published by refused requests, want 0", len(got))
	}
	// The same form with the page's token is accepted: the refusals above
	// were the token's doing.
	if resp := decide(t, c, e.base, "run-a", a.ID, url.Values{"decision": {"deny"}, "hash": {a.Hash}, "csrf": {token}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("post with the page's token: %s, want 303", resp.Status)
	}
	if got := e.published(t, "run-a"); len(got) != 1 || got[0].Decision != events.DecisionDeny {
		t.Errorf("published %+v, want one denial", got)
	}
}

// hostile is what a model can put in its arguments: markup, an event
// handler, a javascript: link, and a quote to break out of an attribute.
const hostile = `{"note":"<script>alert(1)</script><img src=x onerror=\"alert(2)\"><a href=\"javascript:alert(3)\">click</a>'\"","to":"x"}`

func TestConsole_HostileTextIsText(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.pause(t, "run-a", hostile)
	c := e.client(t)
	_, page := get(t, c, e.base+"/runs/run-a")
	for _, bad := range []string{"<script>alert", "<img", "onerror=\"", "href=\"javascript:", "<a href=\\\"javascript"} {
		if strings.Contains(page, bad) {
			t.Errorf("run page holds %q unescaped", bad)
		}
	}
	// It is there, as text.
	if !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(page, "onerror=") {
		t.Errorf("run page does not show the hostile presentation as text")
	}
	if strings.Count(page, "<script") != 1 || !strings.Contains(page, `<script src="`+e.console.Path()+`static/console.js" defer></script>`) {
		t.Errorf("run page has a script other than the console's own file")
	}
	// The live list goes out as JSON data for textContent.
	waitPending(t, e, c, "run-a")
	_, list := get(t, c, e.base+"/approvals")
	if strings.Contains(list, "<script>alert") || strings.Contains(list, "<img") {
		t.Errorf("approvals page holds hostile markup unescaped:\n%s", list)
	}
}

// TestConsole_ModelTextShowsAsWhatItIs: arguments holding a right-to-left
// override (which a browser lays out reversed: "1000" shown for "0001"),
// zero-width characters and a C1 control reach the decision page and the
// approvals page escaped, visible for what they are, never as themselves;
// the page still shows the approval's hash to grant.
func TestConsole_ModelTextShowsAsWhatItIs(t *testing.T) {
	e := newEnv(t, envConfig{})
	a := e.pause(t, "run-a", `{"to":"ops","amount":"\u202e0001\u202c","note":"pay\u200b\u009b"}`)
	c := e.client(t)
	waitPending(t, e, c, "run-a")
	for _, u := range []string{"/runs/run-a", "/approvals"} {
		_, page := get(t, c, e.base+u)
		if shown := visible.String(page); shown != page {
			i := strings.IndexFunc(page, func(r rune) bool { return visible.String(string(r)) != string(r) })
			t.Errorf("%s holds a character a browser acts on or hides, at byte %d: %q", u, i, page[max(i-20, 0):min(i+20, len(page))])
		}
	}
	_, page := get(t, c, e.base+"/runs/run-a")
	for _, want := range []string{`\u202e0001\u202c`, `pay\u200b\u009b`, a.Hash} {
		if !strings.Contains(page, want) {
			t.Errorf("decision page lacks %q", want)
		}
	}
}

// liveFeed opens the live approvals feed and returns its data lines.
func liveFeed(t *testing.T, e *env, c *http.Client) <-chan string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, e.base+"/approvals/live", nil)
	cl := *c
	cl.Timeout = 0
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("live feed content type %q", ct)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				lines <- l
			}
		}
	}()
	return lines
}

// next returns the feed's next list, failing after 10s.
func next(t *testing.T, lines <-chan string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatal("live feed ended")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no event on the live feed in 10s")
	}
	return ""
}

// waitPending reads the live feed until run is in it.
func waitPending(t *testing.T, e *env, c *http.Client, run string) string {
	t.Helper()
	lines := liveFeed(t, e, c)
	for {
		if l := next(t, lines); strings.Contains(l, `"run":"`+run+`"`) {
			return l
		}
	}
}

// TestConsole_PendingAppearsLive: a subscriber that got the list without
// the approval gets the approval when it is asked for, and loses it when
// it is decided and recorded.
func TestConsole_PendingAppearsLive(t *testing.T) {
	e := newEnv(t, envConfig{})
	c := e.client(t)
	lines := liveFeed(t, e, c)
	for l := next(t, lines); l != "[]"; l = next(t, lines) {
		// Lists before the feed's first look may come first; they are empty.
		if strings.Contains(l, "run-live") {
			t.Fatalf("run-live listed before it was asked for: %s", l)
		}
	}
	a := e.pause(t, "run-live", `{"note":"late"}`)
	l := next(t, lines)
	if !strings.Contains(l, `"run":"run-live"`) || !strings.Contains(l, a.ID) || !strings.Contains(l, `"tool":"send"`) {
		t.Fatalf("live event %q does not name approval %s of tool send on run-live", l, a.ID)
	}
	if _, err := e.console.Decide(t.Context(), "run-live", a.ID, "deny", a.Hash, "no"); err != nil {
		t.Fatal(err)
	}
	e.resume(t, "run-live", `{"note":"late"}`)
	if l := next(t, lines); l != "[]" {
		t.Errorf("after the denial was recorded the feed says %s, want []", l)
	}
}

// TestConsole_GrantIsRecordedByDriver: the page's form signs a grant in
// the console's process; it is published, verifies with the operator's
// key, and a driver records and acts on it; the page then shows the run
// completed.
func TestConsole_GrantIsRecordedByDriver(t *testing.T) {
	e := newEnv(t, envConfig{})
	a := e.pause(t, "run-a", `{"note":"ship it"}`)
	c := e.client(t)
	_, page := get(t, c, e.base+"/runs/run-a")
	for _, want := range []string{a.Hash, e.console.Operator(), "arbiter.decision.v1", a.ID} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not show %q of what the signature covers", want)
		}
	}
	token := csrf(t, page)
	resp := decide(t, c, e.base, "run-a", a.ID, url.Values{"decision": {"grant"}, "hash": {a.Hash}, "csrf": {token}, "reason": {"looked at it"}})
	if want := e.console.Path() + "runs/run-a?published=1"; resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
		t.Fatalf("grant: %s to %q, want 303 to %s", resp.Status, resp.Header.Get("Location"), want)
	}
	pub := e.published(t, "run-a")
	if len(pub) != 1 {
		t.Fatalf("%d decisions published, want 1", len(pub))
	}
	if err := approvals.Verify(e.ops, "run-a", pub[0]); err != nil || pub[0].Decision != events.DecisionGrant || pub[0].Reason != "looked at it" || pub[0].Hash != a.Hash {
		t.Errorf("published %+v (verify: %v), want a verifying grant of hash %s with the reason", pub[0], err, a.Hash)
	}
	v := e.resume(t, "run-a", `{"note":"ship it"}`)
	if v.Run.Status != projector.Completed || e.send.Count() != 1 {
		t.Fatalf("after the grant: run %s, send ran %d times; want COMPLETED and 1", v.Run.Status, e.send.Count())
	}
	_, page = get(t, c, e.base+"/runs/run-a")
	if !strings.Contains(page, `<td id="status">COMPLETED</td>`) || !strings.Contains(page, "consumed") {
		t.Errorf("run page after the grant does not show it completed with the approval consumed")
	}
	// A second grant of the same approval is refused: it is no longer
	// pending, and nothing more is published.
	resp = decide(t, c, e.base, "run-a", a.ID, url.Values{"decision": {"grant"}, "hash": {a.Hash}, "csrf": {token}})
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("grant of a consumed approval: %s, want 409", resp.Status)
	}
	if got := len(e.published(t, "run-a")); got != 1 {
		t.Errorf("%d decisions published, want still 1", got)
	}
}

func TestConsole_StaleHashRefused(t *testing.T) {
	e := newEnv(t, envConfig{})
	a := e.pause(t, "run-a", `{"note":"x"}`)
	c := e.client(t)
	_, page := get(t, c, e.base+"/runs/run-a")
	for name, form := range map[string]url.Values{
		"another hash":  {"decision": {"grant"}, "hash": {strings.Repeat("0", 64)}, "csrf": {csrf(t, page)}},
		"bad decision":  {"decision": {"maybe"}, "hash": {a.Hash}, "csrf": {csrf(t, page)}},
		"no such appr.": {"decision": {"grant"}, "hash": {a.Hash}, "csrf": {csrf(t, page)}},
	} {
		id := a.ID
		if name == "no such appr." {
			id = "nope"
		}
		want := http.StatusConflict
		if name == "bad decision" {
			want = http.StatusBadRequest
		}
		if resp := decide(t, c, e.base, "run-a", id, form); resp.StatusCode != want {
			t.Errorf("%s: %s, want %d", name, resp.Status, want)
		}
	}
	if got := len(e.published(t, "run-a")); got != 0 {
		t.Errorf("%d decisions published, want 0", got)
	}
}

func TestConsole_BadInputIsNamed(t *testing.T) {
	e := newEnv(t, envConfig{})
	c := e.client(t)
	for q, want := range map[string]string{
		"/?status=DONE":                       `unknown status "DONE"`,
		"/?after=1.2.3":                       "cursor",
		"/?after=x":                           "not a number",
		"/?since=yesterday":                   `since "yesterday"`,
		"/?since=2026-12-02&until=2026-12-01": "before since",
		"/runs/bad%20id":                      "run id",
	} {
		code, body := get(t, c, e.base+q)
		if code != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d %q, want 400 naming %q", q, code, body, want)
		}
	}
	if code, _ := get(t, c, e.base+"/runs/nothere"); code != http.StatusNotFound {
		t.Errorf("GET an unknown run: %d, want 404", code)
	}
}

func TestConfig_Validate(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	pubOnly, err := nkeys.FromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envConfig{})
	for name, cfg := range map[string]console.Config{
		"no log":          {Queue: &fleet.Queue{}, Key: kp},
		"no queue":        {Log: e.log, Key: kp},
		"no key":          {Log: e.log, Queue: &fleet.Queue{}},
		"public key only": {Log: e.log, Queue: &fleet.Queue{}, Key: pubOnly},
		"page size":       {Log: e.log, Queue: &fleet.Queue{}, Key: kp, PageSize: 501},
	} {
		if _, err := console.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := console.New(console.Config{Log: e.log, Queue: &fleet.Queue{}, Key: kp}); err != nil {
		t.Errorf("a whole config: %v", err)
	}
}

// TestConsole_BrokenRunShownNotDecided: a run whose stored events do not
// verify is shown as BROKEN, in the list and on its page, with no decision
// form, and a decision on it is refused.
func TestConsole_BrokenRunShownNotDecided(t *testing.T) {
	e := newEnv(t, envConfig{})
	a := e.pause(t, "run-b", `{"note":"x"}`)
	c := e.client(t)
	_, page := get(t, c, e.base+"/runs/run-b")
	token := csrf(t, page)
	// A worker-user client stores garbage on the run's subjects.
	if _, err := e.log.JetStream().Publish(t.Context(), e.log.Subject("run-b", events.StepDecided), []byte(`{"not":"an event"}`)); err != nil {
		t.Fatal(err)
	}
	code, page := get(t, c, e.base+"/runs/run-b")
	if code != http.StatusOK || !strings.Contains(page, `id="broken"`) || !strings.Contains(page, "BROKEN") || strings.Contains(page, `id="decide-form"`) {
		t.Errorf("broken run page: %d\n%s", code, page)
	}
	_, list := get(t, c, e.base+"/")
	if !strings.Contains(list, `<tr class="broken">`) {
		t.Errorf("the list does not show run-b as broken:\n%s", list)
	}
	resp := decide(t, c, e.base, "run-b", a.ID, url.Values{"decision": {"grant"}, "hash": {a.Hash}, "csrf": {token}})
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("grant on a broken run: %s, want 409", resp.Status)
	}
	if got := len(e.published(t, "run-b")); got != 0 {
		t.Errorf("%d decisions published on a broken run, want 0", got)
	}
}

// TestConsole_CancelledRunLeavesTheFeed: a waiting run cancelled (no
// approval event) leaves the live list.
func TestConsole_CancelledRunLeavesTheFeed(t *testing.T) {
	e := newEnv(t, envConfig{})
	c := e.client(t)
	lines := liveFeed(t, e, c)
	next(t, lines) // the empty list
	e.pause(t, "run-c", `{"note":"x"}`)
	if l := next(t, lines); !strings.Contains(l, `"run":"run-c"`) {
		t.Fatalf("feed %s, want run-c", l)
	}
	tail, err := e.log.Tail(t.Context(), "run-c")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.New("run-c", events.RunCancelled, events.EndBody{Reason: events.ReasonCancelled})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.log.Append(t.Context(), tail, ev); err != nil {
		t.Fatal(err)
	}
	if l := next(t, lines); l != "[]" {
		t.Errorf("after the cancellation the feed says %s, want []", l)
	}
}

// TestConsole_PathIsTheKeys: the console's path is the same each time it
// runs with one operator key (a notice links under it), another for
// another key, and no random token: a fresh console with the same key has
// the same path and a new access token.
func TestConsole_PathIsTheKeys(t *testing.T) {
	e := newEnv(t, envConfig{})
	q := fleet.NewQueue(e.log.JetStream(), fleet.Config{})
	again, err := console.New(console.Config{Log: e.log, Queue: q, Key: e.key})
	if err != nil {
		t.Fatal(err)
	}
	if again.Path() != e.console.Path() || again.Token() == e.console.Token() {
		t.Errorf("same key: path %s and %s, tokens equal %v; want one path, two tokens", again.Path(), e.console.Path(), again.Token() == e.console.Token())
	}
	other, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	o, err := console.New(console.Config{Log: e.log, Queue: q, Key: other})
	if err != nil {
		t.Fatal(err)
	}
	if o.Path() == e.console.Path() {
		t.Errorf("two keys share the path %s", o.Path())
	}
	if !regexp.MustCompile(`^/c/[A-Za-z0-9_-]{22}/$`).MatchString(o.Path()) {
		t.Errorf("path %q, want /c/ and 22 URL-safe characters", o.Path())
	}
}

// TestConsole_LookalikesAreShownEscaped: two requests can look alike when
// one holds a character that passes for another (a Cyrillic "а" in
// "аlice"). The decision page says so, and shows the request again with
// every character outside ASCII escaped; a request in plain ASCII gets no
// such note.
func TestConsole_LookalikesAreShownEscaped(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.pause(t, "run-look", `{"to":"аlice@example.com"}`)
	e.pause(t, "run-plain", `{"to":"alice@example.com"}`)
	c := e.client(t)
	_, page := get(t, c, e.base+"/runs/run-look")
	if !strings.Contains(page, `id="nonascii"`) || !strings.Contains(page, `\u0430lice@example.com`) {
		t.Errorf("the decision page of a request holding a Cyrillic а does not show it escaped:\n%s", page)
	}
	_, page = get(t, c, e.base+"/runs/run-plain")
	if strings.Contains(page, `id="nonascii"`) {
		t.Errorf("the decision page of a plain ASCII request carries the lookalike note")
	}
}
