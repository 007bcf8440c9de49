package mcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/arbiter-run/arbiter/driver"
	"github.com/arbiter-run/arbiter/events"
)

// Set is the configured MCP servers, connected, and the tools they offer.
type Set struct {
	servers []*server
	tools   []driver.Tool

	mu       sync.Mutex
	withheld []events.WithheldTool // as of the servers' change counts in at; shared, never changed
	at       []uint64
}

// Connect validates cfg, connects to every server in it and lists their
// tools, comparing each with lock. It returns an error naming the server
// when one cannot be reached (closing those that were); after that a server
// that dies is restarted with backoff until [Set.Close]. Which tools are
// offered is decided here, once: [Set.Tools].
func Connect(ctx context.Context, cfg Config, lock Lock, opts Options) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Set{}
	for _, sc := range cfg.Servers {
		srv := newServer(sc, lock.Servers[sc.Name], &opts)
		if err := srv.start(ctx); err != nil {
			s.Close()
			return nil, err
		}
		s.servers = append(s.servers, srv)
		srv.mu.Lock()
		l := srv.listing
		srv.mu.Unlock()
		_, offers := reviewServer(sc, srv.pins, l)
		for _, name := range sortedKeys(offers) {
			s.tools = append(s.tools, &Tool{srv: srv, o: offers[name]})
		}
	}
	return s, nil
}

// Tools returns the tools offered: every pinned tool the operator
// classified (or, with unlisted: strictest, every pinned tool), in server
// order then by name.
func (s *Set) Tools() []driver.Tool { return append([]driver.Tool(nil), s.tools...) }

// Reviews returns the current review of every tool of every server,
// against the lock it was connected with.
func (s *Set) Reviews() []Review {
	var out []Review
	for _, srv := range s.servers {
		srv.mu.Lock()
		l := srv.listing
		srv.mu.Unlock()
		rs, _ := reviewServer(srv.cfg, srv.pins, l)
		out = append(out, rs...)
	}
	return out
}

// Pins returns a lock that pins every tool every server lists now: what
// "arbiter mcp pin" writes. A tool that cannot be pinned (its schema is not
// JSON) is an error naming it.
func (s *Set) Pins() (Lock, error) {
	l := Lock{Version: LockVersion, Servers: map[string]map[string]Pin{}}
	for _, srv := range s.servers {
		srv.mu.Lock()
		listing := srv.listing
		srv.mu.Unlock()
		pins := map[string]Pin{}
		for name, t := range listing {
			if t.err != nil {
				return Lock{}, fmt.Errorf("pin %s__%s: %w", srv.cfg.Name, name, t.err)
			}
			pins[name] = t.pin
		}
		l.Servers[srv.cfg.Name] = pins
	}
	return l, nil
}

// Close disconnects every server and stops restarting them.
func (s *Set) Close() error {
	var errs []error
	for _, srv := range s.servers {
		if err := srv.close(); err != nil {
			errs = append(errs, fmt.Errorf("close mcp server %s: %w", srv.cfg.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Withheld lists, from the last review of every server's tools (on
// connect, reconnect and every list-changed), the tools that are not as
// they were pinned and so are not offered: changed, new, renamed, missing
// or unusable, sorted by name. A driver given it (driver.Config.Withheld)
// records the list on each run when it changes and refuses those tools
// while they are in it, so a tool that changes while a worker runs stops
// being offered at once, and every run's log says so.
func (s *Set) Withheld() []events.WithheldTool {
	// A driver asks before every step: the list is made again only when a
	// server's review changed since.
	at := make([]uint64, len(s.servers))
	for i, srv := range s.servers {
		srv.mu.Lock()
		at[i] = srv.changes
		srv.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at != nil && slices.Equal(at, s.at) {
		return s.withheld
	}
	var out []events.WithheldTool
	for _, srv := range s.servers {
		srv.mu.Lock()
		for _, r := range srv.reviews {
			if r.Status == Pinned {
				continue
			}
			name := r.Name
			if name == "" {
				name = r.Server + "__" + r.Tool
			}
			out = append(out, events.WithheldTool{Name: name, Server: r.Server, Status: string(r.Status), Change: r.Change})
		}
		srv.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	s.withheld, s.at = out, at
	return out
}
