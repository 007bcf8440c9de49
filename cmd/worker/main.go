// Command worker runs an Arbiter worker. With no flags it starts an embedded
// JetStream (stored in --data, listening on 127.0.0.1:4222 so more workers
// and the operator command can join), sets it up as the admin user and works
// on it as the worker user; with --nats it joins an existing server or
// cluster that `arbiter setup` has set up, creating nothing. It drives runs
// from the shared work queue until SIGINT or SIGTERM, then finishes the
// steps in flight, gives its runs back and exits.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/internal/natsflags"
	"github.com/arbiter-run/arbiter/internal/setup"
	"github.com/arbiter-run/arbiter/rules"
	"github.com/arbiter-run/arbiter/rules/kvwindows"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

type flags struct {
	config, data, listen, natsURL, user, password, passwordFile, creds, metrics string
	concurrency                                                                 int
	ackWait                                                                     time.Duration
	operators                                                                   multi
	noAuth                                                                      bool
	durability                                                                  string
	// metricsSet: --metrics was given, so its address is meant exactly.
	metricsSet bool
}

// defaultMetrics is where a worker serves /healthz and /metrics unless told.
const defaultMetrics = "127.0.0.1:9464"

func main() {
	var f flags
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `usage: worker [flags]

Runs an Arbiter worker. With no --nats it starts an embedded JetStream in
--data listening on --listen, with a "worker", an "operator" and an "admin"
user whose passwords it writes to <data>/credentials/, sets it up as the
admin and works as the worker. With --nats it joins a server an
administrator has set up with `+"`arbiter setup`"+`. Runs are driven by the
agents, tools and policy of --config (default: the demo setup).

flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.config, "config", "", "YAML config file: tools, policy, operators, agents, models, limits (default: the demo setup)")
	fs.StringVar(&f.data, "data", "arbiter-data", "data directory of the embedded JetStream and the tools' sandbox")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:4222", "where the embedded JetStream listens (host:port; empty: in-process only)")
	fs.StringVar(&f.natsURL, "nats", "", "join this NATS server or cluster instead of starting an embedded one")
	fs.StringVar(&f.user, "user", "", "NATS user (with --nats)")
	fs.StringVar(&f.password, "password", "", "NATS password (with --nats; seen by anyone who can list processes: prefer --password-file or $"+natsflags.PasswordEnv+")")
	fs.StringVar(&f.passwordFile, "password-file", "", "file holding the NATS password (with --nats)")
	fs.StringVar(&f.creds, "creds", "", "NATS credentials file (with --nats)")
	fs.StringVar(&f.metrics, "metrics", defaultMetrics, "serve /healthz and /metrics here (empty: off); when the default is taken (another worker on this machine) a free port is used and logged")
	fs.IntVar(&f.concurrency, "concurrency", 16, "runs driven at once")
	fs.DurationVar(&f.ackWait, "ack-wait", 30*time.Second, "how long a run may be held without a sign of life before another worker takes it (the embedded server's; with --nats, what arbiter setup set)")
	fs.Var(&f.operators, "operator", "operator public nkey (U…) whose decisions are accepted; repeatable (adds to the config's)")
	fs.BoolVar(&f.noAuth, "no-auth", false, "embedded JetStream without users (anyone on 127.0.0.1 can do anything)")
	fs.StringVar(&f.durability, "durability", "", "what an acknowledged append of the embedded JetStream survives: process (a crash of this process; the default) or machine (also a power loss: every append fsynced first, about 2x slower a step here); config key durability. With --nats it is the server's own setting")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	fs.Visit(func(fl *flag.Flag) { f.metricsSet = f.metricsSet || fl.Name == "metrics" })
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, f, logger); err != nil {
		logger.Error("worker stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags, logger *slog.Logger) error {
	cfg, err := loadConfig(f.config)
	if err != nil {
		return err
	}
	lc := events.Config{Stream: cfg.Log.Stream, Prefix: cfg.Log.Prefix, Shards: cfg.Log.Shards, Replicas: cfg.Log.Replicas}
	fc := fleet.Config{AckWait: f.ackWait, Replicas: cfg.Log.Replicas}
	if f.durability == "" {
		f.durability = cfg.Durability
	}
	syncAlways, err := syncAlwaysFor(f.durability, f.natsURL != "")
	if err != nil {
		return err
	}
	// With every append fsynced, the work queue's nudges stay in memory
	// (no fsync a run for their acks) and are given again from the log
	// when the embedded server starts (fleet.Config.WorkInMemory; the
	// setup renudges).
	fc.WorkInMemory = syncAlways
	nc, shutdown, err := connect(ctx, f, lc, fc, syncAlways, logger)
	if err != nil {
		return err
	}
	defer shutdown()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	log, q, snaps, err := attach(ctx, js, lc, fc, f.natsURL)
	if err != nil {
		return err
	}
	set, err := cfg.mcpSet(ctx, logger)
	if err != nil {
		return err
	}
	var mcpTools []driver.Tool
	var withheld func() []events.WithheldTool
	if set != nil {
		defer set.Close()
		mcpTools, withheld = set.Tools(), set.Withheld
	}
	dc, err := driverConfig(cfg, f, log, logger, withheld, mcpTools...)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := fleet.NewMetrics(reg)
	dc.OnAppend = metrics.OnAppend
	// Nil unless the binary was built with the arbiter_faults tag (the
	// crash tests' build; see fault.go).
	dc.BeforeAppend = faultHook(logger)
	d, err := driver.New(dc)
	if err != nil {
		return err
	}
	agents := cfg.agents()
	var names []string
	for _, t := range d.Tools() {
		names = append(names, t.Name)
	}
	models, err := cfg.modelAgents(os.Getenv, names)
	if err != nil {
		return err
	}
	maps.Copy(agents, models)
	defaults, err := cfg.runDefaults(agents)
	if err != nil {
		return err
	}
	w, err := fleet.NewWorker(fleet.WorkerConfig{
		Driver: d, Queue: q, Snapshots: snaps, Agents: agents, Defaults: defaults, Concurrency: f.concurrency, Logger: logger, Metrics: metrics,
	})
	if err != nil {
		return err
	}
	if f.metrics != "" {
		if err := serveMetrics(ctx, f.metrics, !f.metricsSet, reg, nc, w.Stalled, logger); err != nil {
			return err
		}
	}
	logger.Info("worker running", "pid", os.Getpid(), "concurrency", f.concurrency, "policy", fmt.Sprint(d.PolicyID()), "tools", len(d.Tools()))
	err = w.Run(ctx)
	logger.Info("worker stopped; runs in flight were given back")
	return err
}

// driverConfig builds the driver's configuration from the worker's: its
// tools (the config's, in a sandbox, and extra), policy, shadow policy,
// operators, approval expiry and limits.
func driverConfig(cfg Config, f flags, log *events.Log, logger *slog.Logger, withheld func() []events.WithheldTool, extra ...driver.Tool) (driver.Config, error) {
	var none driver.Config
	sandbox := cfg.Sandbox
	if sandbox == "" {
		sandbox = filepath.Join(f.data, "sandbox")
	}
	if err := os.MkdirAll(sandbox, 0o755); err != nil {
		return none, err
	}
	if len(cfg.Tools) == 0 {
		// The demo agent reads notes.txt: give the default sandbox one.
		notes := filepath.Join(sandbox, "notes.txt")
		if _, err := os.Stat(notes); errors.Is(err, os.ErrNotExist) {
			_ = os.WriteFile(notes, []byte("remember to tell ops the deploy is done\n"), 0o644)
		}
	}
	tools, err := cfg.tools(sandbox)
	if err != nil {
		return none, err
	}
	tools = append(tools, extra...)
	var windows rules.Windows
	if cfg.Policy.Rules != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		w, err := kvwindows.Open(ctx, log.JetStream(), kvwindows.Config{Bucket: cfg.Policy.RateBucket, Replicas: cfg.Log.Replicas})
		cancel()
		if err != nil {
			return none, err
		}
		windows = w
	}
	p, err := cfg.policyWith(windows)
	if err != nil {
		return none, err
	}
	shadow, err := cfg.shadow()
	if err != nil {
		return none, err
	}
	ops, err := cfg.operators(f.operators)
	if err != nil {
		return none, err
	}
	if len(ops) == 0 {
		logger.Warn("no operator keys configured: no grant or denial will be accepted (see `arbiter keygen` and --operator)")
	}
	ttl, err := cfg.approvalTTL()
	if err != nil {
		return none, err
	}
	limits, err := cfg.Limits.Limits()
	if err != nil {
		return none, err
	}
	return driver.Config{
		Log: log, Policy: p, Shadow: shadow, Tools: tools, Limits: limits, ApprovalTTL: ttl, Operators: ops, Logger: logger,
		Withheld: withheld,
	}, nil
}

// connect joins --nats, or starts the embedded JetStream, sets it up as the
// admin user (or anonymously with --no-auth), and connects to it
// in-process as the worker user.
func connect(ctx context.Context, f flags, lc events.Config, fc fleet.Config, syncAlways bool, logger *slog.Logger) (*nats.Conn, func(), error) {
	if f.natsURL != "" {
		nf := natsflags.Flags{User: f.user, Password: f.password, PasswordFile: f.passwordFile, Creds: f.creds}
		opts, err := nf.Options("arbiter-worker")
		if err != nil {
			return nil, nil, err
		}
		// One attempt: a server that is not there at start is a mistake to
		// report (a supervisor restarts the worker), not a wait. Once
		// connected, the worker rides out a server restart (the options
		// reconnect without end, and a step in flight fails and is retried).
		nc, err := nats.Connect(f.natsURL, append(opts, nats.Timeout(5*time.Second))...)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot reach NATS at %s: %w (is the server up and is that its address? a worker with --nats joins a running server; without --nats it starts its own)", f.natsURL, err)
		}
		return nc, nc.Close, nil
	}
	ec := embedded.Config{Dir: filepath.Join(f.data, "jetstream"), SyncAlways: syncAlways}
	if f.listen != "" {
		host, port, err := net.SplitHostPort(f.listen)
		if err != nil {
			return nil, nil, fmt.Errorf("--listen %q: %w", f.listen, err)
		}
		ec.Host = host
		if ec.Port, err = strconv.Atoi(port); err != nil {
			return nil, nil, fmt.Errorf("--listen %q: port: %w", f.listen, err)
		}
	}
	var worker, admin []nats.Option
	if !f.noAuth {
		creds, err := embedded.LoadCredentials(f.data)
		if err != nil {
			return nil, nil, err
		}
		ec.Users = creds.Users(embedded.Subjects{RunPrefix: lc.Prefix, RunStream: lc.Stream, Shards: lc.Shards})
		worker = []nats.Option{nats.UserInfo("worker", creds.Worker), embedded.InboxOption("worker")}
		admin = []nats.Option{nats.UserInfo("admin", creds.Admin), embedded.InboxOption("admin")}
	}
	srv, err := embedded.Start(ec)
	if err != nil {
		return nil, nil, err
	}
	if err := setUp(ctx, srv, admin, lc, fc, logger); err != nil {
		srv.Stop()
		return nil, nil, err
	}
	nc, err := srv.Connect(worker...)
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	urlFile := filepath.Join(f.data, embedded.URLFile)
	if f.listen != "" {
		// Where this server listens, for the commands that read --data.
		if err := os.WriteFile(urlFile, []byte(srv.ClientURL()+"\n"), 0o644); err != nil {
			logger.Warn("cannot say where the embedded JetStream listens", "file", urlFile, "err", err)
		}
	} else {
		_ = os.Remove(urlFile)
	}
	logger.Info("embedded JetStream ready", "store", ec.Dir, "listen", f.listen, "url", srv.ClientURL(), "auth", !f.noAuth, "durability", durabilityName(syncAlways), "shards", lc.WithDefaults().Shards)
	return nc, func() { nc.Close(); _ = os.Remove(urlFile); srv.Stop() }, nil
}

// setUp is the administrator's step on the embedded server, over a
// connection of its own that is closed when done.
func setUp(ctx context.Context, srv *embedded.Server, opts []nats.Option, lc events.Config, fc fleet.Config, logger *slog.Logger) error {
	nc, err := srv.Connect(append(opts, nats.Name("arbiter-worker-setup"))...)
	if err != nil {
		return fmt.Errorf("set up the embedded JetStream: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	changes, err := setup.Run(ctx, js, lc, fc)
	if err != nil {
		return fmt.Errorf("set up the embedded JetStream: %w", err)
	}
	for _, c := range changes {
		if c.Action != "unchanged" {
			logger.Info("setup", "action", c.Action, "kind", c.Kind, "name", c.Name)
		}
	}
	return nil
}

// errNotSetUp marks a server on which the log or the queue does not exist.
var errNotSetUp = errors.New("not set up")

// attach opens the log, the queue and the snapshots that are already on
// the server, creating nothing: the worker user may not.
func attach(ctx context.Context, js jetstream.JetStream, lc events.Config, fc fleet.Config, url string) (*events.Log, *fleet.Queue, *fleet.Snapshots, error) {
	hint := func(err error) error {
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
			return fmt.Errorf("%w: %w; an administrator sets the server up first: arbiter setup --nats %s --user admin --password-file FILE --shards %d",
				errNotSetUp, err, url, lc.WithDefaults().Shards)
		}
		return err
	}
	log, err := events.Attach(ctx, js, lc)
	if err != nil {
		return nil, nil, nil, hint(err)
	}
	if _, err := js.Stream(ctx, decisions.Stream(log)); err != nil {
		return nil, nil, nil, hint(fmt.Errorf("attach log: stream %s: %w", decisions.Stream(log), err))
	}
	q, snaps, err := fleet.Attach(ctx, js, fc)
	if err != nil {
		return nil, nil, nil, hint(err)
	}
	return log, q, snaps, nil
}

// serveMetrics serves /metrics and /healthz on addr. When addr is the
// default (not asked for) and taken, a free port on its host is used and
// logged: two workers on one machine must not stop each other.
func serveMetrics(ctx context.Context, addr string, isDefault bool, reg *prometheus.Registry, nc *nats.Conn, stalled func() []string, logger *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !nc.IsConnected() {
			http.Error(w, "nats: "+nc.Status().String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
		// Runs this worker could not append to on its last try: they are
		// retried with backoff (arbiter_runs_stalled counts them).
		if ids := stalled(); len(ids) > 0 {
			fmt.Fprintf(w, "stalled runs (%d): %s\n", len(ids), strings.Join(ids, " "))
		}
	})
	l, err := net.Listen("tcp", addr)
	if err != nil && isDefault && errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(addr)
		logger.Warn("the default metrics address is taken (another worker?); serving on a free port", "default", addr)
		l, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("--metrics %s: the address is in use (another worker on this machine?): give each worker its own --metrics ADDR, or --metrics '' for none: %w", addr, err)
		}
		return fmt.Errorf("--metrics %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	logger.Info("metrics and health", "addr", l.Addr().String())
	return nil
}

// The durability levels of the embedded server (see the README's
// "Durability" and ADR 0017).
const (
	// durabilityProcess: an acknowledged append survives a crash of the
	// process; JetStream writes it at once and fsyncs every two minutes,
	// so a power loss or a kernel crash can lose the last ones.
	durabilityProcess = "process"
	// durabilityMachine: every append is fsynced before it is
	// acknowledged (JetStream's SyncAlways), so it survives a power loss.
	durabilityMachine = "machine"
)

// syncAlwaysFor is whether durability level d asks for SyncAlways. A level
// given with --nats is refused: a server the worker joins has its own.
func syncAlwaysFor(d string, joined bool) (bool, error) {
	switch {
	case d != "" && joined:
		return false, fmt.Errorf("durability %q: with --nats the server's own setting decides (sync_interval: always in its jetstream block for machine, a cluster with log.replicas: 3 to survive a lost node); drop --durability and the config's durability", d)
	case d == "" || d == durabilityProcess:
		return false, nil
	case d == durabilityMachine:
		return true, nil
	}
	return false, fmt.Errorf("durability %q: want %s (survives a crash of the process; the default) or %s (also a power loss: every append fsynced)", d, durabilityProcess, durabilityMachine)
}

func durabilityName(syncAlways bool) string {
	if syncAlways {
		return durabilityMachine
	}
	return durabilityProcess
}
