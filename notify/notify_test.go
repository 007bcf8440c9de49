package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/nats-io/nats.go"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/notify"
	"github.com/arbiter-run/arbiter/policy"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/arbiter-run/arbiter/testkit"
)

// quotePolicy asks an operator for every send, with the model's note in
// the reason: hostile text for the notice.
type quotePolicy struct{}

func (quotePolicy) Evaluate(_ context.Context, req policy.Request, _ projector.View) (policy.Ruling, error) {
	if req.Tool.Name != "send" {
		return policy.Ruling{Outcome: events.Allow}, nil
	}
	var a struct{ Note string }
	_ = json.Unmarshal(req.Args, &a)
	return policy.NeedApproval("remote_mutation", "send: "+a.Note, map[string]string{"tool": "send"}, nil)
}

type world struct {
	log *events.Log
	d   *driver.Driver
}

func newWorld(t *testing.T) *world {
	t.Helper()
	j := testkit.JetStream(t)
	w := &world{log: j.Log(t, events.Config{})}
	var err error
	w.d, err = driver.New(driver.Config{Log: w.log, Policy: policy.WithID(quotePolicy{}, "quote"),
		Tools: []driver.Tool{testkit.NewLedger("send", events.RemoteMutation, testkit.AnyObject), testkit.NewLedger("done", events.ReadOnly, testkit.AnyObject).Terminal()}})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// pause drives a new run onto its approval and returns the approval's id.
func (w *world) pause(t *testing.T, run, note string) string {
	t.Helper()
	r, err := w.d.Create(t.Context(), run, "mail", nil)
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(map[string]string{"note": note})
	if err := w.d.Drive(t.Context(), r, testkit.NewScript(testkit.Call("send", string(args)), testkit.Call("done", `{}`))); err != nil {
		t.Fatal(err)
	}
	v := r.View()
	a := v.PendingApproval()
	if a == nil {
		t.Fatalf("run %s %s, want it waiting", run, v.Run.Status)
	}
	return a.ID
}

// receiver is an endpoint on 127.0.0.1 that fails the first failFirst
// posts of each delivery, then records it.
type receiver struct {
	srv       *httptest.Server
	secret    []byte
	failFirst int

	mu       sync.Mutex
	attempts map[string]int
	got      map[string][]notify.Notice // accepted notices by delivery id
	bodies   [][]byte
	bad      []error
}

func newReceiver(t *testing.T, secret []byte, failFirst int) *receiver {
	r := &receiver{secret: secret, failFirst: failFirst, attempts: map[string]int{}, got: map[string][]notify.Notice{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		id := req.Header.Get(notify.DeliveryHeader)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.secret != nil {
			if err := notify.Verify(r.secret, req.Header.Get(notify.SignatureHeader), b, time.Now(), time.Minute); err != nil {
				r.bad = append(r.bad, err)
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
		}
		r.attempts[id]++
		if r.attempts[id] <= r.failFirst {
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		var n notify.Notice
		_ = json.Unmarshal(b, &n)
		r.got[id] = append(r.got[id], n)
		r.bodies = append(r.bodies, b)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// wait waits until every id in ids was accepted.
func (r *receiver) wait(t *testing.T, ids ...string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		r.mu.Lock()
		all := true
		for _, id := range ids {
			all = all && len(r.got[id]) > 0
		}
		r.mu.Unlock()
		if all {
			return
		}
	}
	t.Fatalf("not every notice of %v arrived in 15s", ids)
}

func (r *receiver) count(id string) (accepted, attempts int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[id]), r.attempts[id]
}

func start(t *testing.T, cfg notify.Config) context.CancelFunc {
	t.Helper()
	n, err := notify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("notifier: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

var secret = []byte("0123456789abcdef-test-secret")

// TestNotifier_SignedRetriedDeliveredOnce: a JSON notice is signed so the
// receiver verifies it; the receiver fails twice and gets it on the third
// post, once.
func TestNotifier_SignedRetriedDeliveredOnce(t *testing.T) {
	w := newWorld(t)
	rcv := newReceiver(t, secret, 2)
	start(t, notify.Config{Log: w.log, Endpoints: []notify.Endpoint{{Name: "hook", URL: rcv.srv.URL, Format: notify.JSON, Secret: secret}},
		Backoff: 10 * time.Millisecond, ConsoleURL: "http://127.0.0.1:7788"})
	id := w.pause(t, "run-a", "please")
	rcv.wait(t, id)
	// A later approval's notice arriving proves the first was acknowledged
	// (one shard's requests are taken in order): it will not come again.
	id2 := w.pause(t, "run-b", "again")
	rcv.wait(t, id2)
	if got, attempts := rcv.count(id); got != 1 || attempts != 3 {
		t.Errorf("approval %s: accepted %d after %d posts, want 1 after 3", id, got, attempts)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.bad) != 0 {
		t.Errorf("signatures refused: %v", rcv.bad)
	}
	n := rcv.got[id][0]
	if n.Run != "run-a" || n.Tool != "send" || n.URL != "http://127.0.0.1:7788/runs/run-a" || n.Hash == "" {
		t.Errorf("notice %+v", n)
	}
}

func TestVerify_Refusals(t *testing.T) {
	body := []byte(`{"a":1}`)
	now := time.Now()
	h := notify.Sign(secret, now, body)
	if err := notify.Verify(secret, h, body, now, time.Minute); err != nil {
		t.Fatalf("own signature: %v", err)
	}
	for name, c := range map[string]struct {
		secret []byte
		header string
		body   []byte
		now    time.Time
		want   error
	}{
		"other secret":  {[]byte("another secret, sixteen+"), h, body, now, notify.ErrBadSignature},
		"changed body":  {secret, h, []byte(`{"a":2}`), now, notify.ErrBadSignature},
		"no timestamp":  {secret, "v1=00", body, now, notify.ErrBadSignature},
		"replayed late": {secret, h, body, now.Add(10 * time.Minute), notify.ErrStale},
	} {
		if err := notify.Verify(c.secret, c.header, c.body, c.now, time.Minute); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// TestNotifier_TwoNotifiersAndARestart: two notifiers share the work, one
// stops and a new one starts: still one notice per approval.
func TestNotifier_TwoNotifiersAndARestart(t *testing.T) {
	w := newWorld(t)
	rcv := newReceiver(t, secret, 0)
	cfg := notify.Config{Log: w.log, Endpoints: []notify.Endpoint{{Name: "hook", URL: rcv.srv.URL, Format: notify.JSON, Secret: secret}}, Backoff: 10 * time.Millisecond}
	stopA := start(t, cfg)
	start(t, cfg)
	var ids []string
	for i := range 6 {
		ids = append(ids, w.pause(t, fmt.Sprintf("run-%d", i), "x"))
	}
	rcv.wait(t, ids...)
	stopA()
	start(t, cfg) // A again, as after a restart
	for i := 6; i < 9; i++ {
		ids = append(ids, w.pause(t, fmt.Sprintf("run-%d", i), "x"))
	}
	rcv.wait(t, ids...)
	for _, id := range ids {
		if got, attempts := rcv.count(id); got != 1 || attempts != 1 {
			t.Errorf("approval %s: %d notices in %d posts, want 1 in 1", id, got, attempts)
		}
	}
}

// TestNotifier_SlackTextIsNeutral: a Slack notice holds the model's text
// with no mention, link or markup of it, and the console link.
func TestNotifier_SlackTextIsNeutral(t *testing.T) {
	w := newWorld(t)
	rcv := newReceiver(t, nil, 0)
	start(t, notify.Config{Log: w.log, Endpoints: []notify.Endpoint{{Name: "slack", URL: rcv.srv.URL, Format: notify.Slack}}, ConsoleURL: "http://127.0.0.1:7788"})
	id := w.pause(t, "run-s", "<!channel> @here <@U123> <https://evil.example|click> *bold* `code` http://evil.example www.evil.example")
	rcv.wait(t, id)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var msg struct {
		Text      string `json:"text"`
		LinkNames bool   `json:"link_names"`
	}
	if err := json.Unmarshal(rcv.bodies[0], &msg); err != nil {
		t.Fatal(err)
	}
	links := strings.Count(msg.Text, "<")
	if links != 1 || !strings.Contains(msg.Text, "<http://127.0.0.1:7788/runs/run-s|Open it in the console>") {
		t.Errorf("slack text has %d '<' (want 1, the console link): %q", links, msg.Text)
	}
	for _, bad := range []string{"<!channel>", "@here", "<@U123>", "https://", "http://evil", "www.evil", "*bold*", "`code`"} {
		if strings.Contains(msg.Text, bad) {
			t.Errorf("slack text holds %q: %q", bad, msg.Text)
		}
	}
	if msg.LinkNames {
		t.Error("link_names is on")
	}
}

func TestConfig_Validate(t *testing.T) {
	w := newWorld(t)
	for name, ep := range map[string]notify.Endpoint{
		"not a url":    {Name: "x", URL: "::", Format: notify.JSON, Secret: secret},
		"ftp":          {Name: "x", URL: "ftp://127.0.0.1/", Format: notify.JSON, Secret: secret},
		"format":       {Name: "x", URL: "http://127.0.0.1/", Format: "xml"},
		"short secret": {Name: "x", URL: "http://127.0.0.1/", Format: notify.JSON, Secret: []byte("short")},
	} {
		if _, err := notify.New(notify.Config{Log: w.log, Endpoints: []notify.Endpoint{ep}}); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := notify.New(notify.Config{Log: w.log}); err == nil {
		t.Error("no endpoints: accepted")
	}
}

// FuzzVerify: a header never verifies both a body and that body changed,
// and a signature made for a body always verifies it.
func FuzzVerify(f *testing.F) {
	f.Add("t=1,v1=00", []byte(`{}`))
	f.Add("v1=zz,t=x", []byte(``))
	f.Add(notify.Sign(secret, time.Unix(1_900_000_000, 0), []byte(`{"a":1}`)), []byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		now := time.Unix(1_900_000_000, 0)
		if notify.Verify(secret, header, body, now, time.Hour) == nil &&
			notify.Verify(secret, header, append(append([]byte(nil), body...), ' '), now, time.Hour) == nil {
			t.Fatalf("header %q verifies %q and the same with a space added", header, body)
		}
		if err := notify.Verify(secret, notify.Sign(secret, now, body), body, now, time.Hour); err != nil {
			t.Fatalf("own signature of %q: %v", body, err)
		}
	})
}

// budgetPause appends a run waiting on a budget approval and returns the
// approval's id.
func (w *world) budgetPause(t *testing.T, run string) string {
	t.Helper()
	return testkit.BudgetPause(t, w.log, run, "budget-"+run, w.d.Tools()).Approval.ID
}

// TestNotifier_BudgetApprovalsToo: a run paused over its model budget is
// noticed like a step's approval, with its kind and reason, in the order
// the requests were made.
func TestNotifier_BudgetApprovalsToo(t *testing.T) {
	w := newWorld(t)
	rcv := newReceiver(t, secret, 0)
	start(t, notify.Config{Log: w.log, Endpoints: []notify.Endpoint{{Name: "hook", URL: rcv.srv.URL, Format: notify.JSON, Secret: secret}}, Backoff: 10 * time.Millisecond})
	step := w.pause(t, "run-step", "hello")
	budget := w.budgetPause(t, "run-budget")
	rcv.wait(t, step, budget)
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	n := rcv.got[budget][0]
	if n.Run != "run-budget" || n.Kind != events.BudgetApproval || n.Reason != "model budget:\u200b output tokens" || n.Hash == "" || n.Tool != "" {
		t.Errorf("budget notice %+v", n)
	}
	if got := rcv.got[step][0]; got.Kind == events.BudgetApproval || got.Tool != "send" {
		t.Errorf("step notice %+v", got)
	}
}

// TestNotifier_UpdatesAnOlderConsumer: a consumer an older setup made
// follows the step approvals only; a notifier that may update it brings it
// up to date, so budget approvals are noticed too.
func TestNotifier_UpdatesAnOlderConsumer(t *testing.T) {
	w := newWorld(t)
	cc := notify.ConsumerConfig(w.log, 0, "")
	if len(cc.FilterSubjects) != 2 {
		t.Fatalf("consumer follows %v, want both approval kinds", cc.FilterSubjects)
	}
	old := cc
	old.FilterSubjects, old.FilterSubject = nil, w.log.KindFilter(0, events.ApprovalRequested)
	if _, err := w.log.JetStream().CreateOrUpdateConsumer(t.Context(), w.log.StreamName(0), old); err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t, secret, 0)
	start(t, notify.Config{Log: w.log, Endpoints: []notify.Endpoint{{Name: "hook", URL: rcv.srv.URL, Format: notify.JSON, Secret: secret}}, Backoff: 10 * time.Millisecond})
	budget := w.budgetPause(t, "run-budget")
	rcv.wait(t, budget)
	cons, err := w.log.JetStream().Consumer(t.Context(), w.log.StreamName(0), cc.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.FilterSubjects; !slices.Equal(got, cc.FilterSubjects) {
		t.Errorf("consumer follows %v after the notifier started, want %v", got, cc.FilterSubjects)
	}
}

// TestNotifier_GarbageOnTheBudgetSubjectIsPassedOver: the worker user may
// write run subjects; what it writes there that is not a budget approval
// the run's events bear out (bytes that are no event, a budget approval
// whose run does not fold with it) is reported and passed over, no notice
// is sent for it, and the next real request is noticed.
func TestNotifier_GarbageOnTheBudgetSubjectIsPassedOver(t *testing.T) {
	w := newWorld(t)
	rcv, reported := reportingNotifier(t, w)
	if _, err := w.log.JetStream().Publish(t.Context(), w.log.Subject("junk", events.ApprovalBudget), []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	// A chained, fenced budget approval that claims usage no model call
	// recorded: the run does not fold with it.
	created, err := events.New("unfounded", events.RunCreated, events.RunCreatedBody{Tools: w.d.Tools(), Agent: "model"})
	if err != nil {
		t.Fatal(err)
	}
	tail, err := w.log.Append(t.Context(), events.Tail{}, created)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := approvals.Budget(events.BudgetBody{Approval: events.ApprovalRequest{ID: "budget-forged"}, Call: 2, Attempt: 1,
		Limit: events.ModelUsage{OutputTokens: 60}, Used: events.ModelUsage{Calls: 1, OutputTokens: 30}, Reserve: events.ModelUsage{Calls: 1, OutputTokens: 50},
		Over: "output tokens", Raise: events.ModelUsage{OutputTokens: 60}})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.New("unfounded", events.ApprovalBudget, forged)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.log.Append(t.Context(), tail, ev); err != nil {
		t.Fatal(err)
	}
	real := w.budgetPause(t, "run-real")
	rcv.wait(t, real)
	if got := reported(); len(got) != 2 || !strings.Contains(got[0], "junk") || !strings.Contains(got[1], "unfounded") {
		t.Errorf("reported %q, want the junk message and the run that does not fold", got)
	}
	rcv.onlyNoticed(t, real)
}

// reportingNotifier starts a notifier on w's log sending JSON notices to
// a new receiver, and returns the receiver and what it has reported.
func reportingNotifier(t *testing.T, w *world) (*receiver, func() []string) {
	t.Helper()
	rcv := newReceiver(t, secret, 0)
	var mu sync.Mutex
	var reported []string
	start(t, notify.Config{Log: w.log, Endpoints: []notify.Endpoint{{Name: "hook", URL: rcv.srv.URL, Format: notify.JSON, Secret: secret}}, Backoff: 10 * time.Millisecond,
		Report: func(err error) { mu.Lock(); reported = append(reported, err.Error()); mu.Unlock() }})
	return rcv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reported)
	}
}

// onlyNoticed fails the test unless the one notice r got is approval's.
func (r *receiver) onlyNoticed(t *testing.T, approval string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) != 1 {
		t.Errorf("notices %v, want only %s", r.got, approval)
	}
}

// TestNotifier_MessageClaimingAServerStatusIsPassedOver: an empty message
// stored on an approval subject whose headers claim the server's "409
// Consumer Deleted" (the worker user may store it; any user can have the
// server relay it there) was taken by the JetStream client for that
// status, and the notifier stopped. It is a message like any other: it
// is reported, no notice is sent for it, and the next real request is
// noticed.
func TestNotifier_MessageClaimingAServerStatusIsPassedOver(t *testing.T) {
	w := newWorld(t)
	rcv, reported := reportingNotifier(t, w)
	for _, h := range []nats.Header{
		{"Status": {"409"}, "Description": {"Consumer Deleted"}},
		{"Status": {"400"}, "Description": {"Bad Request"}},
	} {
		if _, err := w.log.JetStream().PublishMsg(t.Context(), &nats.Msg{Subject: w.log.Subject("claims", events.ApprovalRequested), Header: h}); err != nil {
			t.Fatal(err)
		}
	}
	real := w.pause(t, "run-real", "after the claims")
	rcv.wait(t, real)
	if got := reported(); len(got) != 2 || !strings.Contains(got[0], "claims") || !strings.Contains(got[1], "claims") {
		t.Errorf("reported %q, want the two claiming messages", got)
	}
	rcv.onlyNoticed(t, real)
}
