package embedded_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/fleet"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

var confCreds = embedded.Credentials{Worker: "w-secret", Operator: "o-secret", Admin: "a-secret"}

func confEnv(t *testing.T) {
	t.Setenv("ARBITER_WORKER_PASSWORD", confCreds.Worker)
	t.Setenv("ARBITER_OPERATOR_PASSWORD", confCreds.Operator)
	t.Setenv("ARBITER_ADMIN_PASSWORD", confCreds.Admin)
}

// sameUsers holds the users of a loaded configuration file to the embedded
// default's for s.
func sameUsers(t *testing.T, conf string, opts *server.Options, s embedded.Subjects) {
	t.Helper()
	want := confCreds.Users(s)
	if len(opts.Users) != len(want) {
		t.Fatalf("%s has %d users, want %d", conf, len(opts.Users), len(want))
	}
	for i, w := range want {
		got := opts.Users[i]
		if got.Username != w.Username || got.Password != w.Password {
			t.Errorf("user %d = %s/%s, want %s/%s", i, got.Username, got.Password, w.Username, w.Password)
		}
		if !reflect.DeepEqual(got.Permissions, w.Permissions) {
			t.Errorf("%s permissions in %s:\n got %s\nwant %s", w.Username, conf, permString(got.Permissions), permString(w.Permissions))
		}
	}
}

// TestServerConf_MirrorsEmbeddedPermissions loads docs/nats-server.conf, the
// production server config, and holds its users to the embedded default's
// for one shard (its authorization block is embedded.ServerConf's, word for
// word), its listener to loopback, and then starts a server from it.
func TestServerConf_MirrorsEmbeddedPermissions(t *testing.T) {
	const conf = "../docs/nats-server.conf"
	confEnv(t)
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("load %s: %v", conf, err)
	}
	sameUsers(t, conf, opts, embedded.Subjects{})
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), embedded.ServerConf(embedded.Subjects{})) {
		t.Errorf("%s does not hold embedded.ServerConf(Subjects{}) verbatim: paste `arbiter setup --print-server-conf` over its authorization block", conf)
	}
	if !opts.JetStream {
		t.Errorf("%s does not enable JetStream", conf)
	}
	if opts.Host != "127.0.0.1" && opts.TLSConfig == nil {
		t.Errorf("%s listens on %s without TLS, want 127.0.0.1 unless TLS is on", conf, opts.Host)
	}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, ConfigFile: conf})
	if err != nil {
		t.Fatalf("start from %s: %v", conf, err)
	}
	t.Cleanup(srv.Stop)
	c := connect(t, srv, "operator", confCreds.Operator)
	if _, err := c.js.AccountInfo(t.Context()); err != nil {
		t.Errorf("operator account info on a server from %s: %v", conf, err)
	}
	if _, err := nats.Connect(srv.ClientURL(), nats.UserInfo("operator", "wrong")); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("connect with a wrong password = %v, want %v", err, nats.ErrAuthorization)
	}
}

// TestServerConf_ShardedLayout: the block ServerConf prints for three
// shards loads as the embedded default's users for three shards, and a
// server run from it lets the admin set up, the worker append on every
// shard and the operator read every shard.
func TestServerConf_ShardedLayout(t *testing.T) {
	confEnv(t)
	s := embedded.Subjects{Shards: 3}
	conf := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(conf, []byte("jetstream {}\n"+embedded.ServerConf(s)), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("load the printed configuration: %v", err)
	}
	sameUsers(t, conf, opts, s)
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, ConfigFile: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := t.Context()
	cfg := events.Config{Shards: 3}
	admin := connect(t, srv, "admin", confCreds.Admin)
	if _, err := events.Open(ctx, admin.js, cfg); err != nil {
		t.Fatalf("set up as admin: %v", err)
	}
	if _, _, err := fleet.Setup(ctx, admin.js, fleet.Config{}); err != nil {
		t.Fatalf("set up as admin: %v", err)
	}
	worker, operator := connect(t, srv, "worker", confCreds.Worker), connect(t, srv, "operator", confCreds.Operator)
	wl, err := events.Attach(ctx, worker.js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ol, err := events.Attach(ctx, operator.js, cfg)
	if err != nil {
		t.Fatalf("attach as operator: %v", err)
	}
	shards := map[int]bool{}
	for i := 0; len(shards) < 3; i++ {
		run := fmt.Sprintf("run-%d", i)
		if shards[wl.Shard(run)] {
			continue
		}
		shards[wl.Shard(run)] = true
		if _, err := wl.Append(ctx, events.Tail{}, newEvent(t, run, events.RunCreated, events.RunCreatedBody{Agent: "a"})); err != nil {
			t.Fatalf("append on shard %d as worker: %v", wl.Shard(run), err)
		}
		if recs, _, err := ol.Read(ctx, run); err != nil || len(recs) != 1 {
			t.Errorf("read on shard %d as operator: %d events, %v", ol.Shard(run), len(recs), err)
		}
	}
	worker.noViolations(t, "appends on three shards")
	operator.noViolations(t, "reads on three shards")
}

func permString(p *server.Permissions) string {
	if p == nil {
		return "<nil>"
	}
	s := func(sp *server.SubjectPermission) string {
		if sp == nil {
			return "<nil>"
		}
		return fmt.Sprintf("allow %q deny %q", sp.Allow, sp.Deny)
	}
	return "publish " + s(p.Publish) + "; subscribe " + s(p.Subscribe)
}

// TestServerConf_TLSBlockWorks: the commented tls block of
// docs/nats-server.conf, uncommented with a real certificate and opened to
// all interfaces as its comment says, loads, and a client that trusts the
// certificate connects over TLS.
func TestServerConf_TLSBlockWorks(t *testing.T) {
	const conf = "../docs/nats-server.conf"
	confEnv(t)
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir)
	text := string(b)
	start, end := strings.Index(text, "# tls {"), strings.Index(text, "# }\n")
	if start < 0 || end < start {
		t.Fatalf("%s has no commented tls block", conf)
	}
	var block []string
	for _, line := range strings.Split(text[start:end+len("# }")], "\n") {
		block = append(block, strings.TrimPrefix(line, "# "))
	}
	tls := strings.Join(block, "\n")
	tls = strings.ReplaceAll(tls, "/etc/arbiter/tls/server.crt", certFile)
	tls = strings.ReplaceAll(tls, "/etc/arbiter/tls/server.key", keyFile)
	text = text[:start] + tls + text[end+len("# }"):]
	text = strings.Replace(text, "listen: 127.0.0.1:4222", "listen: 0.0.0.0:4222", 1)
	path := filepath.Join(dir, "nats-server.conf")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("the tls block uncommented does not load: %v", err)
	}
	if opts.TLSConfig == nil {
		t.Fatal("the tls block uncommented leaves TLS off")
	}
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: -1, ConfigFile: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("operator", confCreds.Operator), nats.RootCAs(certFile))
	if err != nil {
		t.Fatalf("connect over TLS: %v", err)
	}
	defer nc.Close()
	if !nc.TLSRequired() {
		t.Error("the connection does not use TLS")
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeCert(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "arbiter test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}
