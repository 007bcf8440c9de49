package main

import (
	"flag"
	"strings"

	"github.com/arbiter-run/arbiter/events"
)

// actorFlags are who asks for a run (`arbiter start`), recorded with it for
// policies to see.
type actorFlags struct {
	id, surface string
	roles       listFlag
	attrs       listFlag
}

func (a *actorFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.id, "actor", "", "who asks for the run (recorded with it; policies see it as actor and user). Default: the agent's run_defaults in the live workers' config")
	fs.Var(&a.roles, "role", "a role of the actor (repeatable)")
	fs.Var(&a.attrs, "attr", "an attribute of the actor, KEY=VALUE (repeatable)")
	fs.StringVar(&a.surface, "surface", "", `where the request came from ("api", "mcp", "cli"). Default: the agent's run_defaults`)
}

// actor returns the actor the flags name, or nil when --actor is not given.
func (a *actorFlags) actor() (*events.Actor, error) {
	if a.id == "" {
		if len(a.roles) > 0 || len(a.attrs) > 0 {
			return nil, usageError{"--role and --attr need --actor"}
		}
		return nil, nil
	}
	act := &events.Actor{ID: a.id, Roles: append([]string(nil), a.roles...)}
	for _, kv := range a.attrs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{"--attr " + kv + ": want KEY=VALUE"}
		}
		if act.Attributes == nil {
			act.Attributes = map[string]string{}
		}
		act.Attributes[k] = v
	}
	return act, nil
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// startedAs says who a started run was recorded as asked by, and where
// from, for `arbiter start` to print ("" when neither).
func startedAs(b events.RunCreatedBody) string {
	var s string
	if b.Actor != nil {
		s += ", actor " + b.Actor.ID
		if len(b.Actor.Roles) > 0 {
			s += " (" + strings.Join(b.Actor.Roles, ", ") + ")"
		}
	}
	if b.Surface != "" {
		s += ", surface " + b.Surface
	}
	return s
}
