package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Formats of an endpoint.
const (
	// JSON posts the notice as JSON, signed: the header
	// X-Arbiter-Signature is "t=<unix seconds>,v1=<hex HMAC-SHA256 of
	// "<unix seconds>.<body>" with the endpoint's secret>".
	JSON = "json"
	// Slack posts a Slack-compatible incoming-webhook message ({"text":…}).
	Slack = "slack"
)

// Header names of a notice.
const (
	SignatureHeader = "X-Arbiter-Signature"
	DeliveryHeader  = "X-Arbiter-Delivery"
)

// Errors of signature checks and deliveries.
var (
	ErrBadSignature = errors.New("notice signature does not verify")
	ErrStale        = errors.New("notice timestamp outside the tolerance")
	// ErrRefused marks an endpoint's answer that says retrying is useless
	// (a 4xx other than 408 and 429).
	ErrRefused = errors.New("endpoint refused the notice")
)

// Endpoint is where notices go.
type Endpoint struct {
	// Name is for people and error messages.
	Name string
	// URL is an http or https URL.
	URL string
	// Format is JSON or Slack.
	Format string
	// Secret signs JSON notices (required for JSON).
	Secret []byte
}

// Validate reports an endpoint that cannot work, naming the field.
func (e Endpoint) Validate() error {
	u, err := url.Parse(e.URL)
	switch {
	case err != nil:
		return fmt.Errorf("endpoint %q: url %q: %w", e.Name, e.URL, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return fmt.Errorf("endpoint %q: url %q is not an http(s) URL", e.Name, e.URL)
	case e.Format != JSON && e.Format != Slack:
		return fmt.Errorf("endpoint %q: format %q (want %s or %s)", e.Name, e.Format, JSON, Slack)
	case e.Format == JSON && len(e.Secret) < 16:
		return fmt.Errorf("endpoint %q: a json endpoint needs a secret of at least 16 bytes to sign with (got %d)", e.Name, len(e.Secret))
	}
	return nil
}

// Sign returns the signature header of body sent at t with secret.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a signature header for body, as a receiver does: the MAC
// must match ([ErrBadSignature]) and the timestamp be within tolerance of
// now ([ErrStale]), so a captured notice cannot be replayed later.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: no timestamp in %q", ErrBadSignature, header)
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(secret, ts, body)) {
		return fmt.Errorf("%w: header %q", ErrBadSignature, header)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s from now (tolerance %s)", ErrStale, d.Round(time.Second), tolerance)
	}
	return nil
}

// slackText is the message of a notice for a chat: every model-chosen
// field neutralised, the console link the only link.
func slackText(n Notice) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Approval waiting on run %s: tool %s (%s)\nWhy: %s\nApproval %s, hash %.12s",
		n.Run, neutral(n.Tool), neutral(n.Kind), neutral(n.Reason), neutral(n.Approval), n.Hash)
	if n.Expires != nil {
		fmt.Fprintf(&b, ", expires %s", n.Expires.UTC().Format(time.RFC3339))
	}
	if n.URL != "" {
		fmt.Fprintf(&b, "\n<%s|Open it in the console>", n.URL)
	}
	return b.String()
}

// body is what endpoint e is sent for n.
func body(e Endpoint, n Notice) ([]byte, error) {
	if e.Format == Slack {
		return json.Marshal(struct {
			Text string `json:"text"`
			// No link names: nothing in the text may mention anyone.
			LinkNames   bool `json:"link_names"`
			UnfurlLinks bool `json:"unfurl_links"`
		}{Text: slackText(n)})
	}
	n.Tool, n.Kind, n.Reason = neutral(n.Tool), neutral(n.Kind), neutral(n.Reason)
	return json.Marshal(n)
}

// post sends one attempt of n to e.
func post(ctx context.Context, c *http.Client, e Endpoint, n Notice, data []byte, now time.Time) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(DeliveryHeader, n.Delivery)
	if e.Format == JSON {
		req.Header.Set(SignatureHeader, Sign(e.Secret, now, data))
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != 408 && resp.StatusCode != 429:
		return fmt.Errorf("%w: %s answered %s", ErrRefused, e.Name, resp.Status)
	}
	return fmt.Errorf("%s answered %s", e.Name, resp.Status)
}
