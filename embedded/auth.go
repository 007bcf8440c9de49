package embedded

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Subjects names what the permissions below cover. The zero value takes
// Arbiter's defaults; Shards must match the log's.
type Subjects struct {
	RunPrefix  string // default "arb.run"
	RunStream  string // base name of the runs streams, default "ARB_RUNS"
	Shards     int    // default 1
	WorkPrefix string // default "arb.work"
	KVBucket   string // default "ARB_VIEWS"
	RateBucket string // the fleet-wide rate windows of rules files, default "ARB_RATES"
}

func (s Subjects) withDefaults() Subjects {
	if s.RunPrefix == "" {
		s.RunPrefix = "arb.run"
	}
	if s.RunStream == "" {
		s.RunStream = "ARB_RUNS"
	}
	if s.Shards == 0 {
		s.Shards = 1
	}
	if s.WorkPrefix == "" {
		s.WorkPrefix = "arb.work"
	}
	if s.KVBucket == "" {
		s.KVBucket = "ARB_VIEWS"
	}
	if s.RateBucket == "" {
		s.RateBucket = "ARB_RATES"
	}
	return s
}

// Inbox prefixes: each user receives replies only on its own, so one user
// can never answer another's requests.
const (
	WorkerInbox   = "_INBOX_worker"
	OperatorInbox = "_INBOX_operator"
)

// WorkerPermissions lets a worker do everything a worker does (append run
// events, use the JetStream API, the work queue and the snapshot bucket)
// except publish an operator's decision. It receives replies on
// [WorkerInbox] only: a worker connects with
// nats.CustomInboxPrefix(WorkerInbox).
func WorkerPermissions(s Subjects) *server.Permissions {
	s = s.withDefaults()
	return &server.Permissions{
		Publish: &server.SubjectPermission{
			Allow: []string{s.RunPrefix + ".>", s.WorkPrefix + ".>", "$JS.API.>", "$JS.ACK.>", "$KV." + s.KVBucket + ".>", "$KV." + s.RateBucket + ".>"},
			Deny:  decisionSubjects(s),
		},
		Subscribe: &server.SubjectPermission{Allow: []string{WorkerInbox + ".>"}},
	}
}

// OperatorPermissions lets an operator read the runs streams (info, message
// and direct gets, its own consumers for watching), publish approval
// decisions, and nudge the work queue, and nothing else: no other run event,
// no stream management, nothing on the work queue's consumer. It receives
// replies on [OperatorInbox] only.
func OperatorPermissions(s Subjects) *server.Permissions {
	s = s.withDefaults()
	allow := append(decisionSubjects(s), s.WorkPrefix+".*", "$JS.API.INFO")
	for k := 0; k < s.Shards; k++ {
		st := s.RunStream + "_" + strconv.Itoa(k)
		allow = append(allow,
			"$JS.API.STREAM.INFO."+st, "$JS.API.STREAM.MSG.GET."+st,
			"$JS.API.DIRECT.GET."+st, "$JS.API.DIRECT.GET."+st+".>",
			"$JS.API.CONSUMER.CREATE."+st+".>", "$JS.API.CONSUMER.CREATE."+st,
			"$JS.API.CONSUMER.DURABLE.CREATE."+st+".>", "$JS.API.CONSUMER.INFO."+st+".>",
			"$JS.API.CONSUMER.MSG.NEXT."+st+".>", "$JS.API.CONSUMER.DELETE."+st+".>",
			"$JS.ACK."+st+".>")
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: allow},
		Subscribe: &server.SubjectPermission{Allow: []string{OperatorInbox + ".>"}},
	}
}

// decisionSubjects are the subjects of operator decisions on every run, at
// the depth the log's shard count gives them: <prefix>.<run>.<kind> with one
// shard, <prefix>.<k>.<run>.<kind> with more. Only that depth: the other
// would let an operator write inside a run's fence filter.
func decisionSubjects(s Subjects) []string {
	run := s.RunPrefix + ".*"
	if s.Shards > 1 {
		run = s.RunPrefix + ".*.*"
	}
	return []string{run + ".approval.granted", run + ".approval.denied"}
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

// InboxOption is the connect option that makes user's client receive
// replies on the inbox its permissions allow ("worker" or "operator").
func InboxOption(user string) nats.Option {
	return nats.CustomInboxPrefix("_INBOX_" + user)
}
