package model

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter_ReadsEachForm(t *testing.T) {
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	cases := []struct {
		name   string
		header http.Header
		min    time.Duration
		max    time.Duration
	}{
		{"none", http.Header{}, 0, 0},
		{"milliseconds first", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond, 250 * time.Millisecond},
		{"fractional seconds", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond, 1500 * time.Millisecond},
		{"a date", http.Header{"Retry-After": {date}}, 80 * time.Second, 90 * time.Second},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0, 0},
		{"negative", http.Header{"Retry-After-Ms": {"-5"}}, 0, 0},
	}
	for _, c := range cases {
		if got := retryAfter(c.header); got < c.min || got > c.max {
			t.Errorf("%s: got %s, want between %s and %s", c.name, got, c.min, c.max)
		}
	}
}

func TestHTTPFailure_RetryableStatuses(t *testing.T) {
	for s, want := range map[int]bool{400: false, 401: false, 404: false, 408: true, 409: true, 422: false, 429: true, 500: true, 503: true} {
		if got := httpFailure(s, nil, "x").retryable; got != want {
			t.Errorf("status %d: retryable %t, want %t", s, got, want)
		}
	}
}

func TestAgent_BackoffDoublesUpToItsLimit(t *testing.T) {
	a := &Agent{cfg: Config{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second}}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for try, w := range want {
		if got := a.backoff(try); got != w {
			t.Errorf("try %d: got %s, want %s", try, got, w)
		}
	}
}

func TestTransportFailure_EncodeErrorIsPermanent(t *testing.T) {
	f := transportFailure(fmt.Errorf("%w: tools: bad schema", errEncode))
	if f.retryable || f.unknown {
		t.Errorf("got %+v, want a permanent failure that sent nothing", f)
	}
	if g := transportFailure(errors.New("connection reset")); !g.retryable || !g.unknown {
		t.Errorf("got %+v, want a retryable failure of unknown outcome", g)
	}
}
