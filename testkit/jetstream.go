package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JS is an embedded JetStream server for one test, with a client on it.
type JS struct {
	Server *embedded.Server
	Conn   *nats.Conn
	JS     jetstream.JetStream
}

// JetStream starts an embedded JetStream server storing in t.TempDir(),
// listening on a free port on 127.0.0.1, connects a client in-process, and
// stops both when the test ends.
func JetStream(t testing.TB) *JS {
	t.Helper()
	s, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatalf("start embedded JetStream: %v", err)
	}
	t.Cleanup(s.Stop)
	return connect(t, s)
}

func connect(t testing.TB, s *embedded.Server) *JS {
	t.Helper()
	nc, err := s.Connect()
	if err != nil {
		t.Fatalf("connect to embedded JetStream: %v", err)
	}
	return OnConn(t, s, nc)
}

// OnConn returns s reached through nc (a TCP connection, another client),
// closing nc when the test ends.
func OnConn(t testing.TB, s *embedded.Server, nc *nats.Conn) *JS {
	t.Helper()
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return &JS{Server: s, Conn: nc, JS: js}
}

// Log opens an events log with cfg on j, failing the test on error.
func (j *JS) Log(t testing.TB, cfg events.Config) *events.Log {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := events.Open(ctx, j.JS, cfg)
	if err != nil {
		t.Fatalf("open log: %v", err)
	}
	return l
}

// Cluster starts n embedded JetStream servers routed to each other on
// 127.0.0.1 in this process, waits until the cluster has a JetStream leader
// that sees all n and every node is current, and stops them when the test
// ends. Servers are named a0, a1, ….
func Cluster(t testing.TB, n int) []*embedded.Server {
	t.Helper()
	ports := freePorts(t, n)
	routes := make([]string, n)
	for i, p := range ports {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	servers := make([]*embedded.Server, n)
	for i := range servers {
		s, err := embedded.Start(embedded.Config{
			Dir: t.TempDir(), Name: fmt.Sprintf("a%d", i), Port: -1,
			Cluster: &embedded.ClusterConfig{Name: "arbiter-test", Port: ports[i], Routes: routes},
			// As long as the cluster has to form (below): on a loaded
			// machine (the race detector, packages in parallel) a node
			// waiting for its routes can take more than the default 10s.
			ReadyTimeout: 30 * time.Second,
		})
		if err != nil {
			t.Fatalf("start cluster node %d: %v", i, err)
		}
		servers[i] = s
		t.Cleanup(s.Stop)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if clusterFormed(servers) {
			return servers
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("cluster of %d not formed after 30s: no JetStream leader that sees every node, or a node not current", n)
	return nil
}

// clusterFormed reports whether the servers have a JetStream leader that
// counts every one of them as a peer, and every server is current with it.
func clusterFormed(servers []*embedded.Server) bool {
	formed := false
	for _, s := range servers {
		if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(servers) {
			formed = true
		}
	}
	for _, s := range servers {
		if !s.JetStreamIsCurrent() {
			return false
		}
	}
	return formed
}

// ConnectCluster connects a client over TCP to every server's client URL.
func ConnectCluster(t testing.TB, servers []*embedded.Server) *JS {
	t.Helper()
	url := ""
	for i, s := range servers {
		if i > 0 {
			url += ","
		}
		url += s.ClientURL()
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to cluster: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return &JS{Server: servers[0], Conn: nc, JS: js}
}

// JetStreamWith is [JetStream] with the server configured by cfg: its Dir
// defaults to a temporary directory and its Port to a free one.
func JetStreamWith(t testing.TB, cfg embedded.Config) *JS {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Port == 0 {
		cfg.Port = -1
	}
	s, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("start embedded JetStream: %v", err)
	}
	t.Cleanup(s.Stop)
	return connect(t, s)
}

// Restartable is an embedded JetStream server that a test stops and starts
// again, on the same port of 127.0.0.1 and the same store, as a server
// restarted under clients that reconnect to it.
type Restartable struct {
	t    testing.TB
	dir  string
	port int
	srv  *embedded.Server
}

// RestartableJetStream starts a [Restartable] storing in t.TempDir(); it
// is stopped when the test ends.
func RestartableJetStream(t testing.TB) *Restartable {
	t.Helper()
	r := &Restartable{t: t, dir: t.TempDir(), port: freePorts(t, 1)[0]}
	r.Start()
	return r
}

// Server is the server now running, or the last one stopped.
func (r *Restartable) Server() *embedded.Server { return r.srv }

// Stop stops the server.
func (r *Restartable) Stop() { r.srv.Stop() }

// Start starts the server again where it was.
func (r *Restartable) Start() {
	r.t.Helper()
	s, err := embedded.Start(embedded.Config{Dir: r.dir, Port: r.port})
	if err != nil {
		r.t.Fatalf("start embedded JetStream on port %d: %v", r.port, err)
	}
	r.t.Cleanup(s.Stop)
	r.srv = s
}
