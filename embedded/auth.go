package embedded

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// Subjects names what the permissions below cover. The zero value takes
// Arbiter's defaults.
type Subjects struct {
	RunPrefix  string // default "arb.run"
	WorkPrefix string // default "arb.work"
	KVBucket   string // default "ARB_VIEWS"
}

func (s Subjects) withDefaults() Subjects {
	if s.RunPrefix == "" {
		s.RunPrefix = "arb.run"
	}
	if s.WorkPrefix == "" {
		s.WorkPrefix = "arb.work"
	}
	if s.KVBucket == "" {
		s.KVBucket = "ARB_VIEWS"
	}
	return s
}

// WorkerPermissions lets a worker do everything a worker does (append run
// events, use the JetStream API, the work queue and the snapshot bucket)
// except publish an operator's decision: approval.granted and
// approval.denied are denied on every run, at any shard depth.
func WorkerPermissions(s Subjects) *server.Permissions {
	s = s.withDefaults()
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: []string{s.RunPrefix + ".>", s.WorkPrefix + ".>", "$JS.API.>", "$JS.ACK.>", "$KV." + s.KVBucket + ".>", "_INBOX.>"},
			Deny:  decisionSubjects(s),
		},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "$JS.>"}},
	}
}

// OperatorPermissions lets an operator read runs (stream info, direct and
// message gets, consumers for watching), publish approval decisions, and
// nudge the work queue, and nothing else: no other run event, no stream
// management.
func OperatorPermissions(s Subjects) *server.Permissions {
	s = s.withDefaults()
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: append(decisionSubjects(s),
				s.WorkPrefix+".*",
				"$JS.API.INFO", "$JS.API.STREAM.INFO.>", "$JS.API.STREAM.MSG.GET.>", "$JS.API.DIRECT.GET.>",
				"$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.CREATE.>", "$JS.API.CONSUMER.INFO.>",
				"$JS.API.CONSUMER.MSG.NEXT.>", "$JS.ACK.>", "_INBOX.>"),
		},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "$JS.>"}},
	}
}

func decisionSubjects(s Subjects) []string {
	// With one shard a run subject is <prefix>.<run>.<kind>; with more,
	// <prefix>.<k>.<run>.<kind>. Cover both.
	var out []string
	for _, k := range []string{"approval.granted", "approval.denied"} {
		out = append(out, s.RunPrefix+".*."+k, s.RunPrefix+".*.*."+k)
	}
	return out
}

// Credentials are the passwords of the worker and operator users the
// embedded default creates.
type Credentials struct {
	Worker, Operator string
}

// LoadCredentials reads the users' passwords from dir/credentials, creating
// them (random, mode 0600) the first time.
func LoadCredentials(dir string) (Credentials, error) {
	cdir := filepath.Join(dir, "credentials")
	if err := os.MkdirAll(cdir, 0o700); err != nil {
		return Credentials{}, err
	}
	read := func(name string) (string, error) {
		p := filepath.Join(cdir, name+".password")
		b, err := os.ReadFile(p)
		if err == nil {
			return strings.TrimSpace(string(b)), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		buf := make([]byte, 24)
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		pw := hex.EncodeToString(buf)
		if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("write %s: %w", p, err)
		}
		return pw, nil
	}
	w, err := read("worker")
	if err != nil {
		return Credentials{}, err
	}
	o, err := read("operator")
	if err != nil {
		return Credentials{}, err
	}
	return Credentials{Worker: w, Operator: o}, nil
}

// Users returns the two users, "worker" and "operator", with their
// permissions.
func (c Credentials) Users(s Subjects) []*server.User {
	return []*server.User{
		{Username: "worker", Password: c.Worker, Permissions: WorkerPermissions(s)},
		{Username: "operator", Password: c.Operator, Permissions: OperatorPermissions(s)},
	}
}
