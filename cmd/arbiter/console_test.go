package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/testkit"
)

var consoleURL = regexp.MustCompile(`open (http://127\.0\.0\.1:\d+/c/[A-Za-z0-9_-]{22}/\?token=\S+)`)

// TestConsole_ServesThePrintedURL: `arbiter console` prints a URL with its
// token, serves the run list there, refuses a request without it, and
// stops with its context.
func TestConsole_ServesThePrintedURL(t *testing.T) {
	e := newOpsEnv(t)
	e.pause(t, "run-a", `{"to":"ops"}`)
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- runConsole(ctx, e.args("--key", e.key, "--listen", "127.0.0.1:0"), &out) }()
	var u string
	for deadline := time.Now().Add(10 * time.Second); u == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := consoleURL.FindStringSubmatch(out.String()); m != nil {
			u = m[1]
		}
	}
	if u == "" {
		cancel()
		t.Fatalf("no URL printed in 10s: %q (exit: %v)", out.String(), <-done)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "run-a") {
		t.Errorf("printed URL: %s\n%s", resp.Status, body)
	}
	bare := strings.Split(u, "?")[0]
	resp, err = http.Get(bare)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %s, want 401", resp.Status)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("console exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("console did not stop 10s after its context ended")
	}
}

func TestConsole_NeedsKey(t *testing.T) {
	e := newOpsEnv(t)
	err := runConsole(t.Context(), e.args(), io.Discard)
	var ue usageError
	if !errors.As(err, &ue) {
		t.Errorf("console without --key: %v, want a usage error", err)
	}
}

// TestNotify_PostsAndStops: `arbiter notify --slack URL` posts a notice of
// a waiting approval to a receiver on 127.0.0.1 and stops with its context.
func TestNotify_PostsAndStops(t *testing.T) {
	e := newOpsEnv(t)
	got := make(chan string, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
	}))
	t.Cleanup(rcv.Close)
	a := e.pause(t, "run-n", `{"to":"ops"}`)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- runNotify(ctx, e.args("--slack", rcv.URL, "--console", "http://127.0.0.1:7788"), io.Discard)
	}()
	select {
	case b := <-got:
		if !strings.Contains(b, "run-n") || !strings.Contains(b, a.ID) {
			t.Errorf("notice %s does not name run-n and approval %s", b, a.ID)
		}
	case err := <-done:
		t.Fatalf("notify ended before posting: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("no notice in 15s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("notify exit: %v", err)
	}
	if err := runNotify(t.Context(), e.args(), io.Discard); !errors.As(err, new(usageError)) {
		t.Errorf("notify with no endpoint: %v, want a usage error", err)
	}
}

// TestTraces_ExportsOverOTLP: `arbiter traces --otlp URL --from-start`
// posts the spans of a finished run to an OTLP/HTTP receiver on 127.0.0.1.
func TestTraces_ExportsOverOTLP(t *testing.T) {
	e := newOpsEnv(t)
	r, err := e.d.Create(t.Context(), "run-t", "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.Drive(t.Context(), r, testkit.NewScript(testkit.Call("done", `{}`))); err != nil {
		t.Fatal(err)
	}
	posts := make(chan string, 16)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posts <- r.URL.Path + " " + string(b)
	}))
	t.Cleanup(rcv.Close)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // the batcher exports every 50ms
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- runTraces(ctx, e.args("--otlp", rcv.URL+"/v1/traces", "--from-start"), io.Discard)
	}()
	select {
	case p := <-posts:
		if !strings.HasPrefix(p, "/v1/traces ") || !strings.Contains(p, "run-t") || !strings.Contains(p, "arbiter.tool") {
			t.Errorf("export %q does not hold the run's step span", p)
		}
	case err := <-done:
		t.Fatalf("traces ended before exporting: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("nothing exported in 15s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("traces: %v", err)
	}
	if err := runTraces(t.Context(), e.args(), io.Discard); !errors.As(err, new(usageError)) {
		t.Errorf("traces without --otlp: %v, want a usage error", err)
	}
}
