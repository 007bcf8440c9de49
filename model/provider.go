package model

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/render"
)

// provider speaks one wire format through its SDK.
type provider interface {
	// start begins a run's conversation: the system prompt and the input.
	start(system, input string) conversation
	// send asks the model once (the SDK's own retries are off: every
	// attempt is the agent's, and recorded) and reads its reply. Call,
	// Attempt, LatencyMS, Usage.Calls and spend are the caller's to fill.
	send(ctx context.Context, c conversation, tools []events.ToolSpec) (events.ModelReplyBody, error)
	// classify reads an error send returned.
	classify(err error) failure
}

// conversation is a run's messages in a provider's types, kept between
// steps so each step renders only what is new.
type conversation interface {
	// add renders turns after the ones added before.
	add(turns []render.Turn)
	// steps is how many turns were added.
	steps() int
	// size is the bytes of text the messages hold.
	size() int
}

// errEncode marks a request that could not be encoded, so was not sent.
var errEncode = errors.New("encode the request")

// failure is what became of an attempt that got no reply.
type failure struct {
	status     int
	msg        string
	retryable  bool
	retryAfter time.Duration
	// unknown: the request may have reached the model (a timeout, a
	// dropped connection), so the attempt is charged its reservation.
	unknown bool
}

// httpFailure is an attempt answered with HTTP status s: 408, 409, 429
// and 5xx may pass on a retry, any other status will not.
func httpFailure(s int, h http.Header, msg string) failure {
	f := failure{status: s, msg: msg, retryAfter: retryAfter(h)}
	f.retryable = s == http.StatusRequestTimeout || s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500
	return f
}

// transportFailure is an attempt with no HTTP reply: a timeout or a
// dropped connection. It may pass on a retry, and may have reached the
// model.
func transportFailure(err error) failure {
	if errors.Is(err, errEncode) {
		return failure{msg: err.Error()} // nothing was sent, and asking again encodes the same
	}
	f := failure{msg: err.Error(), retryable: true, unknown: true}
	if errors.Is(err, context.DeadlineExceeded) {
		f.msg = "timed out: " + err.Error()
	}
	return f
}

// retryAfter reads retry-after-ms (milliseconds) or Retry-After (seconds,
// or an HTTP date); zero when neither is usable.
func retryAfter(h http.Header) time.Duration {
	if h == nil {
		return 0
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// cache holds conversations by run, at most max of them: a run not driven
// for a while is simply rendered again from its steps.
type cache struct {
	mu  sync.Mutex
	max int
	m   map[string]conversation
}

func newCache(max int) *cache { return &cache{max: max, m: map[string]conversation{}} }

// take removes run's conversation from the cache and returns it (nil if
// there is none): one Decide at a time owns it.
func (c *cache) take(run string) conversation {
	c.mu.Lock()
	defer c.mu.Unlock()
	conv := c.m[run]
	delete(c.m, run)
	return conv
}

func (c *cache) put(run string, conv conversation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[run] = conv
}
