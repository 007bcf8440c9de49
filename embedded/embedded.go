// Package embedded runs a NATS server with JetStream inside the process: the
// default a worker starts when it is given no server, and the server every
// test uses. The store lives in a directory; a listener on 127.0.0.1 is
// optional, so other processes (more workers, the operator command) can join.
//
// It owns starting and stopping servers, nothing about Arbiter's streams.
package embedded

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config describes an embedded server. The zero value is not valid: Dir is
// required.
type Config struct {
	// Dir is where JetStream stores its data. Required.
	Dir string
	// Name is the server's name (unique within a cluster). Default "arbiter".
	Name string
	// Port is the client port on 127.0.0.1. 0 means no listener (in-process
	// connections only); -1 picks a free port.
	Port int
	// Host to listen on when Port is set. Default "127.0.0.1".
	Host string
	// SyncAlways makes JetStream fsync every write before acknowledging it.
	// Off by default: an acknowledged write then survives a process crash
	// but not a power loss. On costs about 7x on synchronous appends.
	SyncAlways bool
	// Cluster, when set, joins the server to a cluster.
	Cluster *ClusterConfig
	// Users, when set, replaces anonymous access with these users.
	Users []*server.User
	// ConfigFile, when set, is a nats-server configuration file whose
	// settings are loaded first; the fields above then override.
	ConfigFile string
	// ReadyTimeout bounds the wait for the server to accept connections.
	// Default 10s.
	ReadyTimeout time.Duration
}

// ClusterConfig joins a server to a cluster over routes on 127.0.0.1.
type ClusterConfig struct {
	Name   string   // cluster name
	Port   int      // route port (-1 for a free one)
	Routes []string // route URLs of the other servers, nats-route://127.0.0.1:PORT
}

// ErrStoreInUse is returned by [Start] for a store another server, in this
// process or another, holds: the error names the holder's process id.
var ErrStoreInUse = errors.New("store in use")

// URLFile is the file in a worker's data directory that holds the URL its
// embedded server listens on, while it runs, so that other commands on the
// machine (arbiter, replay) find it on whatever port it was given.
const URLFile = "worker.url"

// Server is a running embedded server. It holds its store's lock until
// [Server.Stop] (Shutdown alone leaves it held until the process ends).
type Server struct {
	*server.Server
	lock   *os.File
	unlock sync.Once
}

// Start starts a server and waits until it is ready for connections.
func Start(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded server: no store directory")
	}
	lock, err := lockStore(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	s, err := start(cfg)
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		return nil, err
	}
	return &Server{Server: s, lock: lock}, nil
}

func start(cfg Config) (*server.Server, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		o, err := server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("embedded server: %w", err)
		}
		opts = o
	}
	opts.JetStream = true
	opts.StoreDir = cfg.Dir
	opts.ServerName = cfg.Name
	if opts.ServerName == "" {
		opts.ServerName = "arbiter"
	}
	opts.NoSigs = true
	opts.SyncAlways = cfg.SyncAlways
	opts.Host = cfg.Host
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	switch cfg.Port {
	case 0:
		if cfg.ConfigFile == "" {
			opts.DontListen = true
		}
	default:
		opts.Port = cfg.Port
	}
	if cfg.Users != nil {
		opts.Users = cfg.Users
	}
	if c := cfg.Cluster; c != nil {
		opts.Cluster.Name = c.Name
		opts.Cluster.Host = "127.0.0.1"
		opts.Cluster.Port = c.Port
		opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	go s.Start()
	timeout := cfg.ReadyTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if !s.ReadyForConnections(timeout) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("embedded server: not ready after %s", timeout)
	}
	return s, nil
}

// Connect opens an in-process client connection (no network).
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.Server)}, opts...)
	return nats.Connect("", opts...)
}

// Stop shuts the server down, waits until it has, and releases its store.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
	s.unlock.Do(func() {
		if s.lock != nil {
			s.lock.Close()
		}
	})
}
