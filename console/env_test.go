package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/console"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/internal/setup"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// echoPolicy asks an operator for every call of "send", and shows them the
// arguments the model chose as the presentation, and its note as the
// reason: the hostile text the console must render as text.
type echoPolicy struct{}

func (echoPolicy) Evaluate(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
	if req.Tool.Name != "send" {
		return policy.Ruling{Outcome: events.Allow, Reason: "not a send"}, nil
	}
	var a struct {
		Note string `json:"note"`
	}
	_ = json.Unmarshal(req.Args, &a)
	return policy.NeedApproval("remote_mutation", "send needs an operator: "+a.Note, map[string]string{"tool": "send"}, req.Args)
}

// env is a worker's embedded JetStream with the worker and operator users,
// a driver on the worker's connection that trusts the console's key, and a
// console on the operator's connection behind an httptest server.
type env struct {
	log     *events.Log // the worker's
	d       *driver.Driver
	send    *testkit.Ledger
	ops     approvals.Operators
	console *console.Server
	srv     *httptest.Server
	key     nkeys.KeyPair
	// base is where the console's pages are: the server's URL and the
	// console's path, without its final slash (base + "/runs/x").
	base string
}

type envConfig struct {
	shards   int
	pageSize int
}

func newEnv(t *testing.T, ec envConfig) *env {
	t.Helper()
	data := t.TempDir()
	creds, err := embedded.LoadCredentials(data)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := embedded.Start(embedded.Config{Dir: filepath.Join(data, "jetstream"), Port: -1, Users: creds.Users(embedded.Subjects{Shards: ec.shards})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	cfg := events.Config{Shards: ec.shards}
	// The administrator sets the server up; the worker only attaches.
	anc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("admin", creds.Admin), embedded.InboxOption("admin"))
	if err != nil {
		t.Fatal(err)
	}
	ajs, _ := jetstream.New(anc)
	if _, err := setup.Run(t.Context(), ajs, cfg, fleet.Config{}); err != nil {
		t.Fatal(err)
	}
	anc.Close()
	wnc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("worker", creds.Worker), embedded.InboxOption("worker"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wnc.Close)
	wjs, _ := jetstream.New(wnc)
	e := &env{}
	if e.log, err = events.Attach(t.Context(), wjs, cfg); err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	e.key = kp
	pub, _ := kp.PublicKey()
	e.ops = approvals.Operators{pub: "alice"}
	e.send = testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject)
	e.d, err = driver.New(driver.Config{
		Log: e.log, Policy: policy.WithID(echoPolicy{}, "echo"),
		Tools:     []driver.Tool{e.send, testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()},
		Operators: e.ops,
	})
	if err != nil {
		t.Fatal(err)
	}

	onc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("operator", creds.Operator), embedded.InboxOption("operator"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(onc.Close)
	ojs, _ := jetstream.New(onc)
	olog, err := events.Attach(t.Context(), ojs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.console, err = console.New(console.Config{Log: olog, Queue: fleet.NewQueue(ojs, fleet.Config{}), Key: kp, PageSize: ec.pageSize, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.console.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("console feed: %v", err)
		}
	})
	e.srv = httptest.NewServer(e.console.Handler())
	t.Cleanup(e.srv.Close)
	e.base = e.srv.URL + strings.TrimSuffix(e.console.Path(), "/")
	return e
}

func (e *env) agent(sendArgs string) driver.Agent {
	return testkit.NewScript(testkit.Call("send", sendArgs), testkit.Call("done", `{}`))
}

// pause creates run and drives it onto its approval.
func (e *env) pause(t *testing.T, run, sendArgs string) projector.Approval {
	t.Helper()
	r, err := e.d.Create(t.Context(), run, "mail", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.Drive(t.Context(), r, e.agent(sendArgs)); err != nil {
		t.Fatal(err)
	}
	v := r.View()
	a := v.PendingApproval()
	if a == nil {
		t.Fatalf("run %s: %s, want it waiting", run, v.Run.Status)
	}
	return *a
}

// complete creates run with agent and drives it to its end with no
// approval (its agent only calls done).
func (e *env) complete(t *testing.T, run, agent string) {
	t.Helper()
	r, err := e.d.Create(t.Context(), run, agent, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.Drive(t.Context(), r, testkit.NewScript(testkit.Call("done", `{}`))); err != nil {
		t.Fatal(err)
	}
}

// resume drives run as a worker does when nudged: it records the published
// decisions and acts on them.
func (e *env) resume(t *testing.T, run, sendArgs string) projector.View {
	t.Helper()
	r, err := e.d.Load(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.Drive(t.Context(), r, e.agent(sendArgs)); err != nil {
		t.Fatal(err)
	}
	return r.View()
}

// client returns an HTTP client that opened the console's printed URL, so
// it holds the access cookie.
func (e *env) client(t *testing.T) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	var first *http.Response
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if first == nil {
			first = req.Response
		}
		return nil
	}
	resp, err := c.Get(e.base + "/?token=" + url.QueryEscape(e.console.Token()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.CheckRedirect = nil
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("opening the printed URL: %s", resp.Status)
	}
	// It answered with a redirect to the same page without the token, and
	// a session cookie for the console's path alone.
	if first == nil || first.StatusCode != http.StatusSeeOther || first.Header.Get("Location") != e.console.Path() {
		t.Fatalf("opening the printed URL: first answer %v, want 303 to %s", first, e.console.Path())
	}
	if cs := first.Cookies(); len(cs) != 1 || cs[0].Path != e.console.Path() || !cs[0].HttpOnly || cs[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookies set: %+v, want one, HttpOnly and SameSite=Strict, for path %s", cs, e.console.Path())
	}
	return c
}

// get fetches path and returns the status and body.
func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token a page carries in its decision form.
func csrf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("page has no CSRF field:\n%s", page)
	}
	return m[1]
}

// decide posts a decision form as the page's form would.
func decide(t *testing.T, c *http.Client, base, run, approval string, form url.Values) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/runs/%s/approvals/%s", base, run, approval), strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	c2 := *c
	c2.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// published returns the decisions published for run.
func (e *env) published(t *testing.T, run string) []events.DecisionBody {
	t.Helper()
	msgs, err := decisions.Read(t.Context(), e.log, run, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []events.DecisionBody
	for _, m := range msgs {
		d, err := approvals.ParseDecision(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}
