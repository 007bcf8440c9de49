// Package natsflags holds the command-line flags Arbiter's commands share to
// reach a NATS server and the log on it, and turns them into connect options.
// It owns no behaviour of its own: each command decides what to do with the
// connection.
package natsflags

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/arbiter-run/arbiter/embedded"
	"github.com/arbiter-run/arbiter/events"
	"github.com/arbiter-run/arbiter/internal/layout"
	"github.com/nats-io/nats.go"
)

// Flags are where the server is, who to be on it, and how the log is laid
// out there.
type Flags struct {
	URL, User, Password, Creds, NKey string
	// PasswordFile holds the password (surrounding white space trimmed),
	// so it need not appear on a command line.
	PasswordFile   string
	Stream, Prefix string
	Shards         int
}

// Register adds --nats (defaulting to url), --user, --password,
// --password-file, --creds, --nkey, --stream, --prefix and --shards to fs.
func (f *Flags) Register(fs *flag.FlagSet, url, urlHelp string) {
	fs.StringVar(&f.URL, "nats", url, urlHelp)
	fs.StringVar(&f.User, "user", "", "NATS user name")
	fs.StringVar(&f.Password, "password", "", "NATS password (seen by anyone who can list processes: prefer --password-file or $"+PasswordEnv+")")
	fs.StringVar(&f.PasswordFile, "password-file", "", "file holding the NATS password (e.g. <data>/credentials/admin.password)")
	fs.StringVar(&f.Creds, "creds", "", "NATS credentials file")
	fs.StringVar(&f.NKey, "nkey", "", "NATS nkey seed file to authenticate with")
	fs.StringVar(&f.Stream, "stream", layout.RunStream, "base name of the runs streams")
	fs.StringVar(&f.Prefix, "prefix", layout.RunPrefix, "subject prefix of run events")
	fs.IntVar(&f.Shards, "shards", 1, "number of runs streams the log was created with")
}

// PasswordEnv is the environment variable a NATS password is read from
// when neither --password nor --password-file is given (with --user): it
// does not show in the process list as a flag does.
const PasswordEnv = "ARBITER_NATS_PASSWORD"

// Options returns the connect options for the flags' credentials, under the
// client name. A user gets its own inbox prefix, as the permissions of the
// embedded default and docs/nats-server.conf require. The password is
// --password, else --password-file's, else $ARBITER_NATS_PASSWORD's.
//
// Once connected, the connection rides out a server that goes away for any
// length of time (a gateway or a notifier outlives a restart, not only two
// minutes of one), and holds nothing back while it is away: a publish then
// fails at once, rather than waiting in a buffer to go out after the
// reconnect. An append its caller was told had failed must not land later
// behind the caller's back, as a step decided, that the program never ran,
// which recovery would then ask an operator about.
func (f *Flags) Options(name string) ([]nats.Option, error) {
	return f.options(name, os.Getenv)
}

func (f *Flags) options(name string, getenv func(string) string) ([]nats.Option, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1)}
	if f.Password == "" && f.PasswordFile == "" && f.User != "" {
		f.Password = getenv(PasswordEnv)
	}
	if f.PasswordFile != "" {
		if f.Password != "" {
			return nil, fmt.Errorf("--password and --password-file %s: give one", f.PasswordFile)
		}
		b, err := os.ReadFile(f.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--password-file: %w", err)
		}
		if f.Password = strings.TrimSpace(string(b)); f.Password == "" {
			return nil, fmt.Errorf("--password-file %s: empty", f.PasswordFile)
		}
		if f.User == "" {
			return nil, fmt.Errorf("--password-file %s without --user", f.PasswordFile)
		}
	}
	if f.User != "" {
		opts = append(opts, nats.UserInfo(f.User, f.Password), embedded.InboxOption(f.User))
	}
	if f.Creds != "" {
		opts = append(opts, nats.UserCredentials(f.Creds))
	}
	if f.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(f.NKey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", f.NKey, err)
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// LogConfig is the log layout the flags name.
func (f *Flags) LogConfig() events.Config {
	return events.Config{Stream: f.Stream, Prefix: f.Prefix, Shards: f.Shards}
}
