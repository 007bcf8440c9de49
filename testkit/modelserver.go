package testkit

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/events"
)

// ModelReply is one answer a [ModelServer] gives, in order.
type ModelReply struct {
	// Status of the reply; 0 is 200.
	Status int
	Header http.Header
	// Body is sent as it is, with Content-Type application/json.
	Body string
	// Hang holds the request until the client gives up (or the server
	// closes): a model that times out after the request was sent.
	Hang bool
}

// ModelServer is a model provider on 127.0.0.1 that answers every POST,
// whatever its path (Chat Completions, Messages), with its replies in
// order, and keeps each request's body. Past its last reply it answers
// 500 "script exhausted". A model agent reaches it through its SDK by
// base URL: URL+"/v1" for OpenAI, URL for Anthropic.
type ModelServer struct {
	URL string

	mu       sync.Mutex
	replies  []ModelReply
	requests []ModelRequest
	stop     chan struct{}
}

// ModelRequest is one request a [ModelServer] received.
type ModelRequest struct {
	Path   string
	Header http.Header
	Body   []byte
}

// NewModelServer starts a server with replies, closed when the test ends.
func NewModelServer(t testing.TB, replies ...ModelReply) *ModelServer {
	t.Helper()
	s := &ModelServer{replies: replies, stop: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = srv.URL
	t.Cleanup(func() {
		close(s.stop)
		srv.Close()
	})
	return s
}

// Push adds replies after the ones left.
func (s *ModelServer) Push(replies ...ModelReply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replies = append(s.replies, replies...)
}

// Requests returns the requests received so far, in order.
func (s *ModelServer) Requests() []ModelRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ModelRequest(nil), s.requests...)
}

func (s *ModelServer) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, ModelRequest{Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	var rep ModelReply
	ok := len(s.replies) > 0
	if ok {
		rep, s.replies = s.replies[0], s.replies[1:]
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, `{"error":{"message":"script exhausted","type":"test"}}`, http.StatusInternalServerError)
		return
	}
	if rep.Hang {
		select {
		case <-r.Context().Done():
		case <-s.stop:
		case <-time.After(time.Minute):
		}
		return
	}
	for k, vs := range rep.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if rep.Status == 0 {
		rep.Status = http.StatusOK
	}
	w.WriteHeader(rep.Status)
	_, _ = io.WriteString(w, rep.Body)
}

// RecordedReplies are the replies a run's events recorded (each
// model.replied's response body, in order), to serve the run's model
// traffic again with a [ModelServer], byte for byte and with no network.
func RecordedReplies(recs []events.Record) ([]ModelReply, error) {
	var out []ModelReply
	for _, r := range recs {
		if r.Event.Kind != events.ModelReplied {
			continue
		}
		b, err := events.DecodeBody[events.ModelReplyBody](r.Event)
		if err != nil {
			return nil, fmt.Errorf("recorded replies: event %d: %w", r.Event.Seq, err)
		}
		if b.Response == "" {
			return nil, fmt.Errorf("recorded replies: event %d (call %d) kept no response body", r.Event.Seq, b.Call)
		}
		out = append(out, ModelReply{Body: b.Response})
	}
	return out, nil
}
