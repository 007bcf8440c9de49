package embedded_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/decisions"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/arbiter-run/arbiter/projector"
	"github.com/nats-io/nats.go"
)

// The NATS client and the server do not read a header block alike: the
// client splits its lines at a bare "\n" and stops at the first empty
// line; the server finds its own headers only after "\r\n", keeps a
// status line up to the first "\r" when it stores a message, and serves a
// stored message with its header block less its last two bytes and its
// own headers after it. So a header block that ends early, published where
// a user may publish, is served with the server's headers where the
// client never reads them, and whatever the publisher wrote before the
// empty line (a status, a sequence, a writer's mark) read in their place.
// These tests make such blocks with a client of their own that speaks the
// protocol: the NATS client would never send one.

// rawConn is a NATS protocol connection logged in as one user.
type rawConn struct {
	conn  net.Conn
	r     *bufio.Reader
	inbox string
}

func rawConnect(t *testing.T, srv *embedded.Server, user, password string) *rawConn {
	t.Helper()
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &rawConn{conn: conn, r: bufio.NewReader(conn), inbox: "_INBOX_" + user + ".raw" + events.NewID()}
	if l := c.line(t); !strings.HasPrefix(l, "INFO ") {
		t.Fatalf("server said %q, want INFO", l)
	}
	hello, _ := json.Marshal(map[string]any{"user": user, "pass": password, "headers": true, "verbose": false, "protocol": 1})
	c.write(t, "CONNECT "+string(hello)+"\r\nSUB "+c.inbox+" 1\r\nPING\r\n")
	for {
		switch l := c.line(t); {
		case l == "PONG":
			return c
		case strings.HasPrefix(l, "-ERR"):
			t.Fatalf("connect as %s: %s", user, l)
		}
	}
}

func (c *rawConn) write(t *testing.T, s string) {
	t.Helper()
	if _, err := c.conn.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
}

func (c *rawConn) line(t *testing.T) string {
	t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	l, err := c.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return strings.TrimRight(l, "\r\n")
}

// publish sends hdr (exactly these bytes) and data on subject and returns
// the JetStream acknowledgement.
func (c *rawConn) publish(t *testing.T, subject, hdr string, data []byte) string {
	t.Helper()
	c.write(t, fmt.Sprintf("HPUB %s %s %d %d\r\n%s%s\r\n", subject, c.inbox, len(hdr), len(hdr)+len(data), hdr, data))
	for {
		l := c.line(t)
		switch {
		case strings.HasPrefix(l, "-ERR"):
			t.Fatalf("publish on %s: %s", subject, l)
		case l == "PING":
			c.write(t, "PONG\r\n")
		case strings.HasPrefix(l, "MSG "):
			f := strings.Fields(l)
			var n int
			if _, err := fmt.Sscan(f[len(f)-1], &n); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, n+2)
			for read := 0; read < len(buf); {
				m, err := c.r.Read(buf[read:])
				if err != nil {
					t.Fatal(err)
				}
				read += m
			}
			return string(buf[:n])
		}
	}
}

// earlyEnds are header blocks that end early, each as the operator user
// may publish it on arb.decide.<run>: a status of the server's with no
// "\r" (the server keeps it when it stores the message), the same behind a
// "\r" that is no line end, and a block claiming the server's headers and
// the writer's mark for a bucket key before its empty line.
func earlyEnds(target string) map[string]string {
	return map[string]string{
		"a 404 status, bare newlines": "NATS/1.0 404 Message Not Found\n\nXX",
		"a 404 status behind a \\r":   "NATS/1.0\r 404 Message Not Found\n\nXX",
		"served headers and a mark": "NATS/1.0\r\nX-Pad: 1\nNats-Stream: KV_" + layout.AgentsBucket + "\nNats-Subject: " + target +
			"\nNats-Sequence: 1\nNats-Time-Stamp: " + time.Now().UTC().Format(time.RFC3339Nano) + "\nArbiter-Subject: " + target + "\n\nXX",
	}
}

// TestPermissions_AHeaderBlockThatEndsEarlyHidesNoDecision: the operator
// user publishes, on a run's decision subject, a message whose header
// block ends early, then the configured operator's signed grant. Read
// with a direct get, the first would be a "not found" to the NATS client,
// and every decision after it would never be read (the run expiring
// behind a grant made in time). The worker reads decisions with the API's
// message get, which reads no header block: the message is garbage,
// refused and recorded with its sequence, and the grant after it is taken
// in and the call runs once.
func TestPermissions_AHeaderBlockThatEndsEarlyHidesNoDecision(t *testing.T) {
	for name, hdr := range earlyEnds("$KV." + layout.AgentsBucket + ".x.y") {
		t.Run(name, func(t *testing.T) {
			e := newAuthEnv(t, events.Config{})
			ctx := t.Context()
			a, _ := e.pendingApproval(t)
			raw := rawConnect(t, e.srv, "operator", creds.Operator)
			ack := raw.publish(t, decisions.Subject(e.log, e.run), hdr, []byte("not a decision"))
			var poison struct{ Seq uint64 }
			if err := json.Unmarshal([]byte(ack), &poison); err != nil || poison.Seq == 0 {
				t.Fatalf("the server did not store the message: %s", ack)
			}
			opLog, err := events.Attach(ctx, e.operator.js, events.Config{})
			if err != nil {
				t.Fatal(err)
			}
			g, err := approvals.Sign(e.opKey, e.run, a.ID, a.Hash, events.DecisionGrant, "checked", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := approvals.Publish(ctx, opLog, e.run, g); err != nil {
				t.Fatal(err)
			}
			r, err := e.d.Load(ctx, e.run)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.d.Drive(ctx, r, e.agent()); err != nil {
				t.Fatalf("drive: %v", err)
			}
			v := r.View()
			if len(v.Refusals) != 1 || v.Refusals[0].Intake != poison.Seq {
				t.Errorf("refusals %+v, want the message at decisions seq %d refused", v.Refusals, poison.Seq)
			}
			if v.Run.Status != projector.Completed || e.send.Count() != 1 {
				t.Errorf("after the grant: run %s (%s), the call ran %d times; want COMPLETED, once", v.Run.Status, v.Run.Reason, e.send.Count())
			}
		})
	}
}

// TestPermissions_OperatorServesNoHeaderBlockOfItsOwn: the only streams
// where the operator user chooses a message's header block are the
// decisions stream and the work stream, and it may have the server serve
// neither: no direct get of the decisions stream, in any form (by
// sequence, without headers, by subject, in a batch), and no read of the
// work stream at all. So no relay can carry a block it wrote, one that
// ends early included. Each attempt, aimed at a bucket key, is refused by
// the server, and the decisions stream's API message get, which it may
// use, answers with JSON.
func TestPermissions_OperatorServesNoHeaderBlockOfItsOwn(t *testing.T) {
	e := newAuthEnv(t, events.Config{})
	target := "$KV." + layout.AgentsBucket + ".x.y"
	raw := rawConnect(t, e.srv, "operator", creds.Operator)
	subj := decisions.Subject(e.log, "carrier-"+events.NewID())
	ack := raw.publish(t, subj, earlyEnds(target)["served headers and a mark"], []byte(`{"agent":"billing"}`))
	var carrier struct{ Seq uint64 }
	if err := json.Unmarshal([]byte(ack), &carrier); err != nil || carrier.Seq == 0 {
		t.Fatalf("carrier not stored: %s", ack)
	}
	stream := decisions.Stream(e.log)
	for _, req := range []*nats.Msg{
		{Subject: "$JS.API.DIRECT.GET." + stream, Data: fmt.Appendf(nil, `{"seq":%d}`, carrier.Seq)},
		{Subject: "$JS.API.DIRECT.GET." + stream, Data: fmt.Appendf(nil, `{"seq":%d,"no_hdr":true}`, carrier.Seq)},
		{Subject: "$JS.API.DIRECT.GET." + stream, Data: fmt.Appendf(nil, `{"seq":1,"batch":10}`)},
		{Subject: "$JS.API.DIRECT.GET." + stream + "." + subj},
		{Subject: "$JS.API.DIRECT.GET." + layout.WorkStream, Data: []byte(`{"seq":1}`)},
		{Subject: "$JS.API.STREAM.MSG.GET." + layout.WorkStream, Data: []byte(`{"seq":1}`)},
	} {
		req.Reply = target
		before := len(e.operator.violations())
		if err := e.operator.nc.PublishMsg(req); err != nil {
			t.Fatal(err)
		}
		e.operator.wantViolation(t, before, fmt.Sprintf("%s %s", req.Subject, req.Data))
	}
	// What it may read of the decisions stream is the API's JSON.
	m, err := e.operator.nc.Request("$JS.API.STREAM.MSG.GET."+stream, fmt.Appendf(nil, `{"seq":%d}`, carrier.Seq), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Message struct {
			Seq  uint64 `json:"seq"`
			Data []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &got); err != nil || got.Message.Seq != carrier.Seq || string(got.Message.Data) != `{"agent":"billing"}` || len(m.Header) != 0 {
		t.Errorf("message get of the carrier: %q (headers %v), %v; want the API's JSON holding it", m.Data, m.Header, err)
	}
}
