package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrUnavailable is the error of a call made while its server is not
// connected (it died and is being restarted): the call was never sent.
var ErrUnavailable = errors.New("mcp server not connected")

// server is one configured MCP server: its live session, restarted with
// backoff when it ends, and its latest tool listing.
type server struct {
	cfg    ServerConfig
	pins   map[string]Pin
	opts   *Options
	client *sdk.Client

	mu      sync.Mutex
	sess    *sdk.ClientSession
	down    error             // why sess is nil
	listing map[string]listed // by the server's tool name
	reviews map[string]Review // the last review of each tool, to report changes once
	changes uint64            // counts reviews that changed reviews: what Set.Withheld caches by
	closed  bool

	relist chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
}

// listed is a tool as the server last listed it.
type listed struct {
	tool *sdk.Tool
	pin  Pin
	err  error // the tool cannot be pinned (its schema is not JSON)
}

func newServer(cfg ServerConfig, pins map[string]Pin, opts *Options) *server {
	s := &server{cfg: cfg, pins: pins, opts: opts, relist: make(chan struct{}, 1), done: make(chan struct{}), reviews: map[string]Review{}}
	s.client = sdk.NewClient(&sdk.Implementation{Name: "arbiter", Version: "1"}, &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case s.relist <- struct{}{}:
			default: // a listing is already due
			}
		},
	})
	return s
}

// transport builds the server's transport afresh (a command runs once).
func (s *server) transport() (sdk.Transport, error) {
	if s.cfg.Command != "" {
		cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		for _, k := range sortedKeys(s.cfg.Env) {
			cmd.Env = append(cmd.Env, k+"="+s.cfg.Env[k])
		}
		if s.opts.Stderr != nil {
			cmd.Stderr = s.opts.Stderr
		}
		return &sdk.CommandTransport{Command: cmd, TerminateDuration: time.Second}, nil
	}
	h := http.Header{}
	for _, k := range sortedKeys(s.cfg.Headers) {
		h.Set(k, s.cfg.Headers[k])
	}
	if s.cfg.BearerTokenEnv != "" {
		tok := os.Getenv(s.cfg.BearerTokenEnv)
		if tok == "" {
			return nil, fmt.Errorf("%w: environment variable %s (bearer_token_env of server %s) is not set", ErrConfig, s.cfg.BearerTokenEnv, s.cfg.Name)
		}
		h.Set("Authorization", "Bearer "+tok)
	}
	base := s.opts.HTTPClient
	if base == nil {
		base = http.DefaultClient
	}
	c := base
	if len(h) > 0 {
		with := *base
		with.Transport = headers{h, base.Transport}
		c = &with
	}
	return &sdk.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: c, MaxRetries: -1}, nil
}

// headers adds fixed headers to every request.
type headers struct {
	h    http.Header
	next http.RoundTripper
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	next := t.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// connect opens a session and lists the server's tools.
func (s *server) connect(ctx context.Context) (*sdk.ClientSession, map[string]listed, error) {
	t, err := s.transport()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.connectTimeout())
	defer cancel()
	sess, err := s.client.Connect(ctx, t, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("connect mcp server %s: %w", s.cfg.Name, err)
	}
	l, err := list(ctx, sess)
	if err != nil {
		sess.Close()
		return nil, nil, fmt.Errorf("list tools of mcp server %s: %w", s.cfg.Name, err)
	}
	return sess, l, nil
}

// list reads every page of the server's tool list.
func list(ctx context.Context, sess *sdk.ClientSession) (map[string]listed, error) {
	out := map[string]listed{}
	var cursor string
	for page := 0; page < 1000; page++ {
		res, err := sess.ListTools(ctx, &sdk.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, t := range res.Tools {
			p, err := pinOf(t)
			out[t.Name] = listed{tool: t, pin: p, err: err}
		}
		if res.NextCursor == "" {
			return out, nil
		}
		cursor = res.NextCursor
	}
	return nil, errors.New("more than 1000 pages of tools")
}

// start connects once (an error is returned, nothing keeps running) and then
// keeps the server connected until close.
func (s *server) start(ctx context.Context) error {
	sess, l, err := s.connect(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.sess, s.listing = sess, l
	s.mu.Unlock()
	s.review()
	s.wg.Add(2)
	go s.supervise(sess)
	go s.relistLoop()
	return nil
}

// supervise waits for the session to end and reconnects with backoff,
// until close. Calls meanwhile fail with [ErrUnavailable].
func (s *server) supervise(sess *sdk.ClientSession) {
	defer s.wg.Done()
	life := doneCtx(s.done)
	wait := s.opts.minBackoff()
	for {
		began := time.Now()
		err := sess.Wait()
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		if err == nil {
			err = errors.New("session ended")
		}
		s.sess, s.down = nil, err
		s.mu.Unlock()
		s.opts.logger().Warn("mcp server disconnected; restarting", "server", s.cfg.Name, "err", err)
		if time.Since(began) > s.opts.maxBackoff() {
			wait = s.opts.minBackoff() // it ran a good while: not a crash loop
		}
		for {
			select {
			case <-s.done:
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, s.opts.maxBackoff())
			next, l, err := s.connect(life)
			if err == nil {
				s.mu.Lock()
				if s.closed {
					s.mu.Unlock()
					next.Close()
					return
				}
				s.sess, s.down, s.listing = next, nil, l
				s.mu.Unlock()
				s.opts.logger().Info("mcp server reconnected", "server", s.cfg.Name)
				s.review()
				sess = next
				break
			}
			s.mu.Lock()
			s.down = err
			s.mu.Unlock()
			s.opts.logger().Warn("mcp server restart failed", "server", s.cfg.Name, "err", err, "next_in", wait)
		}
	}
}

// doneCtx is a context that ends when done closes.
func doneCtx(done <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-done
		cancel()
	}()
	return ctx
}

// relistLoop lists the tools again on every list-changed notification and
// reports what changed.
func (s *server) relistLoop() {
	defer s.wg.Done()
	life := doneCtx(s.done)
	for {
		select {
		case <-s.done:
			return
		case <-s.relist:
		}
		sess, err := s.session()
		if err != nil {
			continue // the reconnect lists afresh
		}
		ctx, cancel := context.WithTimeout(life, s.opts.connectTimeout())
		l, err := list(ctx, sess)
		cancel()
		if err != nil {
			s.opts.logger().Warn("mcp list tools after list-changed failed", "server", s.cfg.Name, "err", err)
			continue
		}
		s.mu.Lock()
		s.listing = l
		s.mu.Unlock()
		s.review()
	}
}

// session returns the live session, or an error wrapping [ErrUnavailable].
func (s *server) session() (*sdk.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil {
		return nil, fmt.Errorf("%w: %s (%v); it is being restarted", ErrUnavailable, s.cfg.Name, s.down)
	}
	return s.sess, nil
}

// broken closes sess after a call on it failed in transport, so supervise
// reconnects (an HTTP session does not end by itself when its server goes).
func (s *server) broken(sess *sdk.ClientSession) {
	s.mu.Lock()
	if s.sess == sess {
		s.sess, s.down = nil, errors.New("a call failed in transport")
	}
	s.mu.Unlock()
	go sess.Close()
}

// current is tool name as the server last listed it.
func (s *server) current(name string) (listed, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.listing[name]
	return l, ok
}

// review compares the latest listing with the lock and the config, and
// reports each tool whose review differs from the last one reported.
func (s *server) review() []Review {
	s.mu.Lock()
	l := s.listing
	s.mu.Unlock()
	rs, _ := reviewServer(s.cfg, s.pins, l)
	var report []Review
	s.mu.Lock()
	for _, r := range rs {
		prev, ok := s.reviews[r.Tool]
		if (!ok || prev != r) && r.notable() {
			report = append(report, r)
		}
		if !ok || prev != r {
			s.changes++
		}
		s.reviews[r.Tool] = r
	}
	s.mu.Unlock()
	for _, r := range report {
		s.opts.logger().Warn("mcp tool "+string(r.Status), "server", r.Server, "tool", r.Tool, "change", r.Change, "offered", r.Offered, "note", r.Note)
		if s.opts.OnChange != nil {
			s.opts.OnChange(r)
		}
	}
	return rs
}

func (s *server) close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sess := s.sess
	s.sess, s.down = nil, errors.New("closed")
	s.mu.Unlock()
	close(s.done)
	var err error
	if sess != nil {
		err = sess.Close()
	}
	s.wg.Wait()
	return err
}

// Options tune a [Set]. The zero value is usable.
type Options struct {
	// Logger receives connects, restarts and every notable review (a tool
	// changed, new, renamed, gone, or tightened by its hints). Default:
	// discard.
	Logger *slog.Logger
	// OnChange is called with every notable review as it is made (on
	// connect, reconnect and list-changed).
	OnChange func(Review)
	// Stderr receives stdio servers' standard error. Default: discarded.
	Stderr io.Writer
	// HTTPClient for streamable HTTP servers. Default http.DefaultClient.
	HTTPClient *http.Client
	// MinBackoff and MaxBackoff bound the wait between restarts of a
	// server that died (doubling from min to max). Defaults 200ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// ConnectTimeout bounds a connect and its tool listing. Default 30s.
	ConnectTimeout time.Duration
}

func (o *Options) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}

func (o *Options) minBackoff() time.Duration {
	if o.MinBackoff <= 0 {
		return 200 * time.Millisecond
	}
	return o.MinBackoff
}

func (o *Options) maxBackoff() time.Duration {
	if o.MaxBackoff <= 0 {
		return 30 * time.Second
	}
	return max(o.MaxBackoff, o.minBackoff())
}

func (o *Options) connectTimeout() time.Duration {
	if o.ConnectTimeout <= 0 {
		return 30 * time.Second
	}
	return o.ConnectTimeout
}
