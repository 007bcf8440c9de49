package console

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
)

// cookieName holds the access token once the operator opened the printed
// URL.
const cookieName = "arbiter_console"

// csp is the Content Security Policy of every response: scripts and styles
// only from the console's own files (no inline script, no eval), no
// plugins, no framing, forms posting only back to the console.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// guard sets the security headers on every response and refuses a request
// without the access cookie (401) and a decision without the CSRF token
// (403). The first request carrying the token in its query (the printed
// URL) gets the session cookie and is redirected to the same page without
// the token; the token opens nothing after that, since the browser keeps
// the URL in its history. Everything is served
// under the console's path (see [Server.Path]), to which the cookie is
// scoped: a browser keeps a cookie for a host whatever its port, and would
// otherwise send the token to any other server on 127.0.0.1 it visits.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if !strings.HasPrefix(r.URL.Path, s.base) {
			// Not the console's: the cookie, scoped to its path, was not
			// sent, so nothing here could be authorised anyway.
			http.Error(w, "not found: open the URL `arbiter console` printed", http.StatusNotFound)
			return
		}
		if q := r.URL.Query().Get("token"); q != "" && r.Method == http.MethodGet {
			if !equal(q, s.token) {
				http.Error(w, "wrong access token: open the URL `arbiter console` printed", http.StatusUnauthorized)
				return
			}
			if !s.opened.CompareAndSwap(false, true) {
				// The URL is in the history of the browser that opened it:
				// it must not open the console again.
				http.Error(w, "this URL has been opened already, and opens the console once: go on in the browser that opened it, or start `arbiter console` again for a new URL", http.StatusUnauthorized)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.session, Path: s.base, HttpOnly: true, SameSite: http.SameSiteStrictMode})
			u := *r.URL
			v := u.Query()
			v.Del("token")
			u.RawQuery = v.Encode()
			http.Redirect(w, r, (&url.URL{Path: u.Path, RawQuery: u.RawQuery}).String(), http.StatusSeeOther)
			return
		}
		c, err := r.Cookie(cookieName)
		if err != nil || !equal(c.Value, s.session) {
			http.Error(w, "no access token: open the URL `arbiter console` printed", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// A decision form is a few hundred bytes.
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			// A browser says where a request came from; a cross-site one is
			// refused even before the CSRF token is looked at.
			if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
				http.Error(w, "cross-site request refused", http.StatusForbidden)
				return
			}
			if !equal(r.PostFormValue("csrf"), s.csrf) {
				http.Error(w, "missing or wrong CSRF token: reload the page and decide again", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// maxForm bounds a posted form.
const maxForm = 64 << 10

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
