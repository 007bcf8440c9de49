package console_test

import (
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

var screenshots = flag.String("screenshots", "", "directory the browser tests write screenshots of the main pages to (docs/ in the repository)")

// browser starts headless Chromium for the test, failing it on any
// JavaScript dialog (alert, confirm, prompt): nothing on a console page may
// open one, and a hostile presentation would. It skips when Chromium is
// not installed, except in CI, where .ci/run installs it.
func browser(t *testing.T, dialogs *atomic.Int32) context.Context {
	t.Helper()
	return browserWith(t, dialogs)
}

// browserWith is browser with more options for Chromium (a profile
// directory of the test's own, say).
func browserWith(t *testing.T, dialogs *atomic.Int32, extra ...chromedp.ExecAllocatorOption) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed (.ci/run installs it with apt-get)")
		}
		t.Skip("chromium is not installed: apt-get install -y chromium")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	opts = append(opts, extra...)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	opened := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range opened {
			if err != nil {
				return
			}
			dialogs.Add(1)
			t.Errorf("a JavaScript dialog opened: %q", ev.Message)
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return ctx
}

// run runs actions with a deadline, failing the test on error.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitText polls sel's text until it contains want.
func waitText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		text, err := chromedp.Run(c, chromedp.Text(chromedp.CSS(sel)))
		got = text
		cancel()
		if err == nil && strings.Contains(got, want) {
			return
		}
	}
	t.Fatalf("%s never showed %q (last: %q)", sel, want, got)
}

// evaluate runs expression in the page and returns its value.
func evaluate[T any](t *testing.T, ctx context.Context, expression string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expression))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expression, err)
	}
	return v
}

func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if *screenshots == "" {
		return
	}
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(*screenshots, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// pwn is a presentation that would set window.__pwned if any of it ran:
// a script, an onerror attribute, a javascript: link, and a quote that
// would end an attribute.
const pwn = `{"note":"<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2;alert(2)\"><a id=\"evil\" href=\"javascript:window.__pwned=3\">click me</a>\"'>","to":"ops"}`

// TestBrowser_ListOpenGrantComplete: in real Chromium, an operator opens
// the printed URL, sees the runs, watches a pending approval appear live,
// opens it (its hostile presentation is text, nothing runs), grants it;
// a worker records the grant and the run page shows the run completed.
func TestBrowser_ListOpenGrantComplete(t *testing.T) {
	e := newEnv(t, envConfig{})
	var dialogs atomic.Int32
	ctx := browser(t, &dialogs)
	e.complete(t, "run-done", "mail")

	run(t, ctx, "open the printed URL", chromedp.Navigate(e.base+"/?token="+e.console.Token()))
	waitText(t, ctx, "#runs tbody", "run-done")
	waitText(t, ctx, "#runs tbody", "COMPLETED")

	run(t, ctx, "open pending approvals", chromedp.Navigate(e.base+"/approvals"),
		chromedp.WaitReady(chromedp.CSS(`body[data-live="1"]`)))
	e.pause(t, "run-wait", pwn)
	waitText(t, ctx, "#pending", "run run-wait")
	shoot(t, ctx, "console-approvals.png")

	run(t, ctx, "open the run", chromedp.Click(chromedp.CSS(`#pending a`)), chromedp.WaitVisible(chromedp.CSS("#decide")))
	waitText(t, ctx, "#presentation", `<script>window.__pwned=1</script>`)
	waitText(t, ctx, "#presentation", `onerror=`)
	pwned := evaluate[bool](t, ctx, `window.__pwned !== undefined`)
	injected := evaluate[int](t, ctx, `document.querySelectorAll("#evil, img, #presentation *, #args *").length`)
	if pwned || injected != 0 {
		t.Errorf("hostile presentation ran (window.__pwned set: %v) or became elements (%d)", pwned, injected)
	}
	waitText(t, ctx, "#signing", e.console.Operator())
	shoot(t, ctx, "console-run-waiting.png")

	run(t, ctx, "grant", chromedp.SendKeys(chromedp.CSS("#reason"), "checked the recipient"),
		chromedp.Click(chromedp.CSS("#grant")), chromedp.WaitVisible(chromedp.CSS("#published")))
	if got := e.published(t, "run-wait"); len(got) != 1 || got[0].Reason != "checked the recipient" {
		t.Fatalf("published %+v, want one grant with the typed reason", got)
	}
	// A worker records the grant and finishes the run; the page follows.
	if v := e.resume(t, "run-wait", pwn); v.Run.Status != "COMPLETED" {
		t.Fatalf("run %s after the grant, want COMPLETED", v.Run.Status)
	}
	waitText(t, ctx, "#status", "COMPLETED")
	waitText(t, ctx, "#approvals", "consumed")
	shoot(t, ctx, "console-run-completed.png")
	run(t, ctx, "list", chromedp.Navigate(e.base+"/"))
	waitText(t, ctx, "#runs tbody", "run-wait")
	shoot(t, ctx, "console-runs.png")
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d dialogs opened", n)
	}
}

// TestBrowser_Refusals: a browser without the token is refused, and a
// decision whose CSRF token was changed is refused and publishes nothing.
func TestBrowser_Refusals(t *testing.T) {
	e := newEnv(t, envConfig{})
	var dialogs atomic.Int32
	ctx := browser(t, &dialogs)
	e.pause(t, "run-a", `{"note":"x"}`)

	run(t, ctx, "no token", chromedp.Navigate(e.base+"/runs/run-a"))
	body := evaluate[string](t, ctx, `document.body.innerText`)
	if !strings.Contains(body, "no access token") || strings.Contains(body, "WAITING") {
		t.Errorf("without the token the page says %q", body)
	}
	run(t, ctx, "wrong CSRF",
		chromedp.Navigate(e.base+"/runs/run-a?token="+e.console.Token()),
		chromedp.WaitVisible(chromedp.CSS("#decide")),
		chromedp.SetValue(chromedp.CSS(`input[name="csrf"]`), "forged"),
		chromedp.Click(chromedp.CSS("#grant")),
		chromedp.WaitReady(chromedp.CSS("body")),
	)
	waitText(t, ctx, "body", "CSRF token")
	if got := e.published(t, "run-a"); len(got) != 0 {
		t.Errorf("%d decisions published with a forged CSRF token, want 0", len(got))
	}
	// The same form with the page's own token goes through.
	run(t, ctx, "right CSRF", chromedp.Navigate(e.base+"/runs/run-a"), chromedp.WaitVisible(chromedp.CSS("#decide")),
		chromedp.Click(chromedp.CSS("#deny")), chromedp.WaitVisible(chromedp.CSS("#published")))
	if got := e.published(t, "run-a"); len(got) != 1 {
		t.Errorf("%d decisions published with the page's token, want 1", len(got))
	}
}

// TestBrowser_TokenStaysWithTheConsole: a browser keeps a cookie for a host
// whatever its port, so an access cookie for all of 127.0.0.1 would go to
// every other server there the operator's browser visits, and whoever runs
// one could decide as the operator. In real Chromium, once the operator
// opened the printed URL, another server on 127.0.0.1 (another port) is
// visited at its root and at another console's path: the cookie reaches
// neither, while the console still has it. (A server sent to the console's
// own path would get it: the path, random for each console, is known only
// to the browser that opened the printed URL.)
func TestBrowser_TokenStaysWithTheConsole(t *testing.T) {
	e := newEnv(t, envConfig{})
	var dialogs atomic.Int32
	ctx := browser(t, &dialogs)
	e.pause(t, "run-a", `{"note":"x"}`)

	var mu sync.Mutex
	var seen []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" cookie="+r.Header.Get("Cookie"))
		mu.Unlock()
		_, _ = io.WriteString(w, "<!doctype html><title>elsewhere</title><p id=here>elsewhere</p>")
	}))
	t.Cleanup(other.Close)
	if !strings.HasPrefix(other.URL, "http://127.0.0.1:") || !strings.HasPrefix(e.base, "http://127.0.0.1:") || other.URL == e.srv.URL {
		t.Fatalf("the servers are %s and %s: the test needs two ports of one host", other.URL, e.srv.URL)
	}

	run(t, ctx, "open the printed URL", chromedp.Navigate(e.base+"/?token="+e.console.Token()))
	waitText(t, ctx, "#runs tbody", "run-a")
	for _, path := range []string{"/", "/c/" + strings.Repeat("A", 22) + "/runs/run-a"} {
		run(t, ctx, "visit "+path+" on the other server", chromedp.Navigate(other.URL+path), chromedp.WaitVisible(chromedp.CSS("#here")))
	}
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	if len(got) < 2 {
		t.Fatalf("the other server saw %q, want both visits", got)
	}
	for _, s := range got {
		if strings.Contains(s, e.console.Token()) || strings.Contains(s, "arbiter_console") {
			t.Errorf("the other server was sent the console's cookie: %s", s)
		}
	}
	// The console, visited again, still knows the browser.
	run(t, ctx, "back to the console", chromedp.Navigate(e.base+"/runs/run-a"), chromedp.WaitVisible(chromedp.CSS("#decide")))
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d dialogs opened", n)
	}
}

// TestBrowser_PrintedURLOpensOnce: Chromium keeps the printed URL, token
// and all, in its profile (history, sessions) although the console
// redirects it away at once. Whoever reads those files must not find a
// working credential there: the URL opened the console once, for that
// browser, and opens nothing again.
func TestBrowser_PrintedURLOpensOnce(t *testing.T) {
	e := newEnv(t, envConfig{})
	var dialogs atomic.Int32
	profile := t.TempDir()
	ctx := browserWith(t, &dialogs, chromedp.UserDataDir(profile))
	e.pause(t, "run-a", `{"note":"x"}`)
	printed := e.base + "/?token=" + e.console.Token()
	run(t, ctx, "open the printed URL", chromedp.Navigate(printed))
	waitText(t, ctx, "#runs tbody", "run-a")
	if loc := evaluate[string](t, ctx, `location.href`); strings.Contains(loc, e.console.Token()) {
		t.Errorf("the address bar still holds the token: %s", loc)
	}
	run(t, ctx, "open the run", chromedp.Navigate(e.base+"/runs/run-a"), chromedp.WaitVisible(chromedp.CSS("#decide")))
	// Quit the browser as a person would, so it writes its profile out.
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Cancel(c); err != nil {
		t.Fatalf("close chromium: %v", err)
	}
	var kept []string
	_ = filepath.WalkDir(profile, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), e.console.Token()) {
			rel, _ := filepath.Rel(profile, p)
			kept = append(kept, rel)
		}
		return nil
	})
	if len(kept) == 0 {
		t.Fatalf("no file of the profile holds the printed URL's token: the test no longer shows what it guards against")
	}
	t.Logf("profile files holding the printed URL: %q", kept)
	code, body := get(t, &http.Client{Timeout: 10 * time.Second}, printed)
	if code != http.StatusUnauthorized || strings.Contains(body, "run-a") {
		t.Errorf("the printed URL, read back from the profile and opened by another client: %d %q, want 401", code, body)
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d dialogs opened", n)
	}
}

// TestBrowser_RightToLeftTextKeepsTheBytesOrder: the arguments name two
// people in Hebrew letters, each with an amount: ["אבי",5,"דני",1000000].
// No control character is involved (internal/visible escapes those), yet
// a browser's bidirectional algorithm draws such a run right to left, so
// that 1000000 shows before 5 and beside אבי: the operator would sign
// bytes that say otherwise. In real Chromium, every character of the
// arguments is drawn in the order of its bytes, left to right.
func TestBrowser_RightToLeftTextKeepsTheBytesOrder(t *testing.T) {
	e := newEnv(t, envConfig{})
	var dialogs atomic.Int32
	ctx := browser(t, &dialogs)
	e.pause(t, "run-rtl", `{"note":"pay","pay":["אבי",5,"דני",1000000]}`)
	run(t, ctx, "open the run", chromedp.Navigate(e.base+"/runs/run-rtl?token="+e.console.Token()), chromedp.WaitVisible(chromedp.CSS("#args")))
	// Each character's box, in the order of the text: on one line, each
	// must start to the right of the one before.
	order := evaluate[string](t, ctx, `(() => {
	  const node = document.getElementById("args").firstChild;
	  const s = node.textContent;
	  let prev = null, out = "";
	  for (let i = 0; i < s.length; i++) {
	    const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
	    const b = r.getBoundingClientRect();
	    if (prev && Math.abs(b.top - prev.top) < 1 && b.left < prev.left) out += "char " + i + " (" + s[i] + ") is drawn left of char " + (i - 1) + "; ";
	    prev = b;
	  }
	  return out;
	})()`)
	if order != "" {
		t.Errorf("the arguments are not drawn in the order of their bytes: %s", order)
	}
	if n := dialogs.Load(); n != 0 {
		t.Errorf("%d dialogs opened", n)
	}
}
