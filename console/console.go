package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/arbiter-run/arbiter/client"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/nats-io/nkeys"
)

// Errors the console answers with. A handler maps them to HTTP statuses.
var (
	// ErrBadRequest marks a request the console cannot read: a malformed
	// cursor, filter or form.
	ErrBadRequest = errors.New("bad request")
	// ErrStale marks a decision on an approval that is no longer what the
	// operator was shown: it was decided, or its hash differs.
	ErrStale = errors.New("approval is not what the page showed")
	// ErrBroken marks a run whose events do not verify or fold (it is
	// client.ErrBroken).
	ErrBroken = client.ErrBroken
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config is what a console serves. Log, Queue and Key are required.
type Config struct {
	// Log is the runs log, attached with the operator's NATS user.
	Log *events.Log
	// Queue is the fleet's work queue: a decision is followed by a nudge.
	Queue *fleet.Queue
	// Key is the operator's key pair (an nkeys user seed): it signs every
	// decision made through this console.
	Key nkeys.KeyPair
	// PageSize is the number of runs a page lists. Default 50, at most 500.
	PageSize int
	// ScanLimit bounds how many runs one filtered page folds to fill
	// itself (a filter by agent, actor, or a live status). Default 20 pages'
	// worth.
	ScanLimit int
	// Poll is how often the live approvals feed looks for new approval
	// events. Default 250ms.
	Poll time.Duration
	// Now is the clock decisions are signed by. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.PageSize == 0 {
		c.PageSize = 50
	}
	if c.ScanLimit == 0 {
		c.ScanLimit = 20 * c.PageSize
	}
	if c.Poll == 0 {
		c.Poll = 250 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports a configuration that cannot work, naming the field.
func (c Config) Validate() error {
	switch {
	case c.Log == nil:
		return errors.New("console config: no Log")
	case c.Queue == nil:
		return errors.New("console config: no Queue")
	case c.Key == nil:
		return errors.New("console config: no operator Key")
	case c.PageSize < 0 || c.PageSize > 500:
		return fmt.Errorf("console config: page size %d (want 1..500)", c.PageSize)
	case c.ScanLimit < 0:
		return fmt.Errorf("console config: negative scan limit %d", c.ScanLimit)
	}
	if _, err := c.Key.PublicKey(); err != nil {
		return fmt.Errorf("console config: operator key: %w", err)
	}
	if _, err := c.Key.Seed(); err != nil {
		return fmt.Errorf("console config: operator key cannot sign (a public key, not a seed?): %w", err)
	}
	return nil
}

// Server is a console. Its [Server.Handler] serves every page; each needs
// the server's access token, and each decision its CSRF token.
type Server struct {
	cfg      Config
	operator string
	token    string // printed; opens the console once (see guard)
	opened   atomic.Bool
	session  string // the cookie's value, given to the browser that opened it
	csrf     string
	// base is the path every page is served under (see Path): the access
	// cookie is scoped to it, so a browser sends the cookie to the console
	// and to no other server on the same host (a cookie is not scoped to a
	// port, but is to a path).
	base    string
	tmpl    *template.Template
	pending *pendingFeed
	client  *client.Client
}

// New returns a console for cfg with a fresh random access token and CSRF
// token. It does no I/O: the live feed starts with [Server.Run].
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	pub, _ := cfg.Key.PublicKey()
	base, err := pathOf(cfg.Key)
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New("").Funcs(funcs).Funcs(template.FuncMap{"base": func() string { return base }}).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console templates: %w", err)
	}
	s := &Server{cfg: cfg, operator: pub, token: random(), session: random(), csrf: random(), base: base, tmpl: tmpl, client: client.New(cfg.Log, cfg.Queue)}
	s.pending = newPendingFeed(s.client, cfg.Poll)
	return s, nil
}

// pathOf is the console's path for the operator key k: "/c/" and 22
// characters of a hash of its seed. It is the same each time the console
// runs with the key (so notices can link under it), and nobody without the
// seed can tell it.
func pathOf(k nkeys.KeyPair) (string, error) {
	seed, err := k.Seed()
	if err != nil {
		return "", fmt.Errorf("console path: %w", err)
	}
	sum := sha256.Sum256(append([]byte("arbiter console path\x00"), seed...))
	return "/c/" + base64.RawURLEncoding.EncodeToString(sum[:])[:22] + "/", nil
}

func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Token is the access token: open Path() + "?token=" + Token(), and the
// browser is given a session cookie scoped to Path(). It works once: a
// browser keeps the URL it opened in its history and session files, where
// it would otherwise stay a working credential for as long as the console
// runs. Another browser needs another console.
func (s *Server) Token() string { return s.token }

// Path is the path every page is served under, "/c/<22 characters>/",
// derived from the operator key's seed: the same each time the console
// runs with that key, and unknown to anyone without it. The runs list is
// Path() itself, a run Path() + "runs/<id>". Anything outside it is not
// found.
func (s *Server) Path() string { return s.base }

// Operator is the public key decisions are signed with.
func (s *Server) Operator() string { return s.operator }

// Run follows approval events for the live pending page until ctx is
// done. It returns the error that stopped it, or nil when ctx ended.
func (s *Server) Run(ctx context.Context) error { return s.pending.run(ctx) }

// Handler returns the console's HTTP handler.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	b := s.base
	mux.Handle("GET "+b+"static/", http.StripPrefix(b+"static/", http.FileServerFS(static)))
	mux.HandleFunc("GET "+b+"{$}", s.handleRuns)
	mux.HandleFunc("GET "+b+"runs/{run}", s.handleRun)
	mux.HandleFunc("GET "+b+"runs/{run}/live", s.handleRunLive)
	mux.HandleFunc("GET "+b+"approvals", s.handleApprovals)
	mux.HandleFunc("GET "+b+"approvals/live", s.handleApprovalsLive)
	mux.HandleFunc("POST "+b+"runs/{run}/approvals/{approval}", s.handleDecide)
	return s.guard(mux)
}

// List returns the page of runs selected by f that starts at cursor (""
// for the newest), PageSize runs a page, folding at most ScanLimit runs
// to fill a filtered one ([client.Client.List]). A listing that cannot be
// made wraps [ErrBadRequest].
func (s *Server) List(ctx context.Context, f client.Filter, cur string) (client.Page, error) {
	p, err := s.client.List(ctx, f, cur, s.cfg.PageSize, s.cfg.ScanLimit)
	if errors.Is(err, client.ErrBadFilter) {
		return client.Page{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return p, err
}
