package embedded

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// ServerConf returns the authorization block of a nats-server configuration
// file that gives the worker, operator and admin users exactly the
// permissions [Credentials.Users] gives them for s, with their passwords
// taken from the environment ($ARBITER_WORKER_PASSWORD,
// $ARBITER_OPERATOR_PASSWORD, $ARBITER_ADMIN_PASSWORD). docs/nats-server.conf
// holds it for the defaults; `arbiter setup --print-server-conf` prints it
// for another layout (more shards).
func ServerConf(s Subjects) string {
	var b strings.Builder
	b.WriteString("authorization {\n  users: [\n")
	users := Credentials{}.Users(s)
	notes := map[string][]string{
		"worker": {
			"runs cmd/worker: appends run events (on every shard), records the",
			"decisions it verified, nudges, expiry timers, snapshots; reads the",
			"runs, decisions and snapshot streams; takes work from the one work",
			"consumer. No stream, consumer or bucket management; no decision.",
		},
		"operator": {
			"runs cmd/arbiter: publishes signed decisions on arb.decide.<run>",
			"and nudges; reads the runs streams with direct gets, the decisions",
			"stream with the API's message get only (no direct get: ADR 0024).",
			"No run subject, no consumer API, no management.",
		},
		"admin": {
			"runs `arbiter setup`: the JetStream API only (creates and updates",
			"the streams, the work consumer and the snapshot bucket).",
		},
	}
	for _, u := range users {
		b.WriteString("    {\n")
		for _, n := range notes[u.Username] {
			fmt.Fprintf(&b, "      # %s\n", n)
		}
		fmt.Fprintf(&b, "      user: %s\n", u.Username)
		fmt.Fprintf(&b, "      password: $ARBITER_%s_PASSWORD\n", strings.ToUpper(u.Username))
		b.WriteString("      permissions: {\n")
		writePerm(&b, "publish", u.Permissions.Publish)
		writePerm(&b, "subscribe", u.Permissions.Subscribe)
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func writePerm(b *strings.Builder, name string, p *server.SubjectPermission) {
	if p == nil {
		return
	}
	fmt.Fprintf(b, "        %s: {\n", name)
	list := func(key string, subjects []string) {
		if len(subjects) == 0 {
			return
		}
		fmt.Fprintf(b, "          %s: [\n", key)
		for _, s := range subjects {
			fmt.Fprintf(b, "            %q\n", s)
		}
		b.WriteString("          ]\n")
	}
	list("allow", p.Allow)
	list("deny", p.Deny)
	b.WriteString("        }\n")
}
