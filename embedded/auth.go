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

	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Subjects names what the permissions below cover. The zero value takes
// Arbiter's defaults; every field must match the log's (events.Config) and
// the fleet's (fleet.Config).
type Subjects struct {
	RunPrefix      string // default "arb.run"
	RunStream      string // base name of the runs streams, default "ARB_RUNS"
	Shards         int    // default 1
	DecisionPrefix string // default "arb.decide"
	DecisionStream string // default "ARB_DECISIONS"
	WorkPrefix     string // default "arb.work"
	WorkStream     string // default "ARB_WORK"
	Consumer       string // the work queue's durable consumer, default "arb-workers"
	KVBucket       string // default "ARB_VIEWS"
	AgentsBucket   string // the agents registry, default "ARB_AGENTS"
	RateBucket     string // the fleet-wide rate windows of rules files, default "ARB_RATES"
	NotifyConsumer string // the notifiers' consumers, "<name>_<k>" on each runs stream, default "arbiter_notify"
}

func (s Subjects) withDefaults() Subjects {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&s.RunPrefix, layout.RunPrefix)
	def(&s.RunStream, layout.RunStream)
	def(&s.DecisionPrefix, layout.DecisionPrefix)
	def(&s.DecisionStream, layout.DecisionStream)
	def(&s.WorkPrefix, layout.WorkPrefix)
	def(&s.WorkStream, layout.WorkStream)
	def(&s.Consumer, layout.WorkConsumer)
	def(&s.KVBucket, layout.ViewsBucket)
	def(&s.AgentsBucket, layout.AgentsBucket)
	if s.Shards == 0 {
		s.Shards = 1
	}
	def(&s.RateBucket, layout.RatesBucket)
	def(&s.NotifyConsumer, layout.NotifyConsumer)
	return s
}

// runStreams are the names of the runs streams, ARB_RUNS_0..K-1.
func (s Subjects) runStreams() []string {
	out := make([]string, s.Shards)
	for k := range out {
		out[k] = layout.ShardStream(s.RunStream, k)
	}
	return out
}

// Inbox prefixes: each user receives replies only on its own, so one user
// can never answer another's requests.
const (
	WorkerInbox   = "_INBOX_worker"
	OperatorInbox = "_INBOX_operator"
	AdminInbox    = "_INBOX_admin"
)

// reads are the JetStream API subjects that read stream: its info, and a
// stored message by sequence or by subject, directly or through the leader.
func reads(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.STREAM.MSG.GET." + stream,
	}
}

// WorkerPermissions lets a worker do exactly what a worker does: append run
// events on every shard's subjects (decisions it has verified included),
// publish nudges and expiry timers, put snapshots and its offer of agents,
// read the runs streams, the decisions stream and both buckets, and take
// and acknowledge work from the fleet's one consumer. It may not create,
// update, delete or purge any stream, consumer or bucket (that is the
// admin's step), delete a message, or publish an operator's decision
// (arb.decide.>). It receives replies on [WorkerInbox] only: a worker
// connects with nats.CustomInboxPrefix(WorkerInbox).
func WorkerPermissions(s Subjects) *server.Permissions {
	s = s.withDefaults()
	allow := []string{
		s.RunPrefix + ".>", s.WorkPrefix + ".>", "$KV." + s.KVBucket + ".>", "$KV." + s.AgentsBucket + ".>", "$KV." + s.RateBucket + ".>",
		"$JS.ACK." + s.WorkStream + "." + s.Consumer + ".>",
		"$JS.API.INFO",
	}
	for _, st := range s.runStreams() {
		allow = append(allow, reads(st)...)
	}
	// The notifiers' consumers, one a shard, made by the admin's setup: a
	// notifier (run with the worker's user) takes and acks approval
	// requests from them, and may not change them.
	for k, st := range s.runStreams() {
		c := s.NotifyConsumer + "_" + strconv.Itoa(k)
		allow = append(allow, "$JS.API.CONSUMER.INFO."+st+"."+c, "$JS.API.CONSUMER.MSG.NEXT."+st+"."+c, "$JS.ACK."+st+"."+c+".>")
	}
	allow = append(allow, reads(s.DecisionStream)...)
	allow = append(allow, reads("KV_"+s.KVBucket)...)
	allow = append(allow, reads("KV_"+s.AgentsBucket)...)
	allow = append(allow, reads("KV_"+s.RateBucket)...)
	allow = append(allow,
		"$JS.API.STREAM.INFO."+s.WorkStream,
		"$JS.API.CONSUMER.INFO."+s.WorkStream+"."+s.Consumer,
		"$JS.API.CONSUMER.MSG.NEXT."+s.WorkStream+"."+s.Consumer)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: allow, Deny: []string{s.DecisionPrefix + ".>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{WorkerInbox + ".>"}},
	}
}

// OperatorPermissions lets an operator publish signed decisions (on
// arb.decide.<run>, one token per run), nudge the work queue (arb.work.<run>),
// read the runs streams with info and message gets, and the decisions
// stream with info and the API's message get only, and nothing else: no run
// subject of any shard layout, no consumer API at all (so no consumer of
// anyone's can be created, changed, deleted or drained), no stream or
// bucket management, no snapshot. It receives replies on [OperatorInbox]
// only.
//
// No direct get of the decisions stream: the operator chooses the header
// block of what it publishes there, and a direct get's reply, sent to a
// reply subject of its choosing (NATS does not check it), would store that
// block where a stream listens: a block that ends early hides the headers
// the server adds after it from the NATS client, and the publisher's own
// take their place (docs/adr/0024). The API's message get answers with
// JSON, whose relay is garbage with no headers.
func OperatorPermissions(s Subjects) *server.Permissions {
	s = s.withDefaults()
	allow := []string{s.DecisionPrefix + ".*", s.WorkPrefix + ".*", "$JS.API.INFO"}
	for _, st := range s.runStreams() {
		allow = append(allow, reads(st)...)
	}
	allow = append(allow, "$JS.API.STREAM.INFO."+s.DecisionStream, "$JS.API.STREAM.MSG.GET."+s.DecisionStream)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: allow},
		Subscribe: &server.SubjectPermission{Allow: []string{OperatorInbox + ".>"}},
	}
}

// AdminPermissions is the administrator's: the whole JetStream API, used to
// create and update the streams, the work consumer and the buckets
// (`arbiter setup`, or a worker hosting the embedded server), and nothing
// outside it (no run event, no decision, no nudge). It receives replies on
// [AdminInbox] only.
func AdminPermissions() *server.Permissions {
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"$JS.API.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{AdminInbox + ".>"}},
	}
}

// Credentials are the passwords of the worker, operator and admin users
// the embedded default creates.
type Credentials struct {
	Worker, Operator, Admin string
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
	a, err := read("admin")
	if err != nil {
		return Credentials{}, err
	}
	return Credentials{Worker: w, Operator: o, Admin: a}, nil
}

// Users returns the three users, "worker", "operator" and "admin", with
// their permissions.
func (c Credentials) Users(s Subjects) []*server.User {
	return []*server.User{
		{Username: "worker", Password: c.Worker, Permissions: WorkerPermissions(s)},
		{Username: "operator", Password: c.Operator, Permissions: OperatorPermissions(s)},
		{Username: "admin", Password: c.Admin, Permissions: AdminPermissions()},
	}
}

// InboxOption is the connect option that makes user's client receive
// replies on the inbox its permissions allow ("worker", "operator" or
// "admin").
func InboxOption(user string) nats.Option {
	return nats.CustomInboxPrefix("_INBOX_" + user)
}
