package events

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPublisher_GoesWithItsConnection: a connection's publisher is dropped
// when the connection closes, and its waiters are told.
func TestPublisher_GoesWithItsConnection(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Open(ctx, js, Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.publisher()
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	select {
	case <-p.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("publisher not told of its connection's close in 10 s")
	}
	publishers.Lock()
	_, held := publishers.m[nc]
	publishers.Unlock()
	if held {
		t.Error("a closed connection's publisher is still held")
	}
	if _, err := publisherFor(nc); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("publisher for a closed connection: got %v, want ErrConnectionClosed", err)
	}
	ev, err := New("r", RunCreated, RunCreatedBody{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin(ctx, Tail{}, ev); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Errorf("append on a closed connection: got %v, want ErrConnectionClosed", err)
	}
}
