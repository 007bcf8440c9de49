// Package bucket reads and writes Arbiter's JetStream KV buckets (the
// snapshots, the agents registry, the rate windows of rules files) so that
// a value is believed only when a client that may write the bucket stored
// it: never when the server stored a reply of its own there.
//
// NATS checks a publisher's subject against its permissions, not the reply
// subject it names, and the server sends every JetStream API reply to that
// reply subject, where any stream listening stores it. So a user who may
// not write a bucket (the operator user) can still have a value stored on
// any of its keys: a stream's info, or, with a direct get of a message it
// published where it may, that message's exact bytes. Such a relay carries
// either no header at all (an API reply's JSON; a direct get asked for no
// headers) or the headers of the message it copies together with the
// server's own (Nats-Stream, Nats-Subject, Nats-Sequence,
// Nats-Time-Stamp), which [jsinbox] refuses as forged. No relay carries a
// header of the client's choosing without the server's beside it.
//
// So every value written here carries [jsinbox.SubjectMark], naming the
// subject it was written on, and a value is believed only when read with
// the server's headers ([jsinbox.Inbox.GetLast]) and carrying exactly that
// mark (see [jsinbox.Marked]). Anything else on a key is [ErrNotWritten]:
// its reader drops it (a snapshot, an offer) or fails closed on it (a
// count). See ADR 0023.
package bucket

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNotWritten: the value stored on a key was not written by a client
// that may write the bucket (it lacks the writer's mark, or carries a
// header only the server sets): a relayed JetStream reply, a value an
// older version wrote, or one written with another tool. It wraps
// [jsinbox.ErrForgedHeader] when that is the reason.
var ErrNotWritten = errors.New("value not written by an Arbiter writer of the bucket")

// ErrConflict: a [Bucket.Create] found the key holding a value, or an
// [Bucket.Update] found a value written since the revision it names.
var ErrConflict = errors.New("the key's value is not the one expected")

// Bucket is one KV bucket, on one connection.
type Bucket struct {
	js   jetstream.JetStream
	name string
}

// New is the bucket named name on js. It checks nothing: the bucket's
// reads and writes fail when it does not exist.
func New(js jetstream.JetStream, name string) *Bucket { return &Bucket{js: js, name: name} }

// Stream is the stream that holds the bucket, KV_<name>.
func (b *Bucket) Stream() string { return "KV_" + b.name }

// Subject is the subject that holds key.
func (b *Bucket) Subject(key string) string { return "$KV." + b.name + "." + key }

// Entry is a value as it was stored: Revision is the stream sequence the
// server gave it.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
}

// Get reads the value of key: [jetstream.ErrKeyNotFound] when the key holds
// none, an error wrapping [ErrNotWritten] when what it holds was not
// written by a writer of the bucket.
func (b *Bucket) Get(ctx context.Context, key string) (Entry, error) {
	if err := validKey(key); err != nil {
		return Entry{}, fmt.Errorf("bucket %s: %w", b.name, err)
	}
	m, err := b.getLast(ctx, b.Subject(key))
	if err != nil {
		return Entry{}, err
	}
	return Entry{Key: key, Value: m.Data, Revision: m.Sequence}, nil
}

// GetSubject reads the value stored on subject, one of the bucket's (no
// wildcard), as [Bucket.Get] does.
func (b *Bucket) GetSubject(ctx context.Context, subject string) (Entry, error) {
	key, ok := strings.CutPrefix(subject, b.Subject(""))
	if !ok {
		return Entry{}, fmt.Errorf("bucket %s: subject %q is not one of the bucket's", b.name, subject)
	}
	if err := validKey(key); err != nil {
		return Entry{}, fmt.Errorf("bucket %s: %w", b.name, err)
	}
	m, err := b.getLast(ctx, subject)
	if err != nil {
		return Entry{}, err
	}
	return Entry{Key: key, Value: m.Data, Revision: m.Sequence}, nil
}

func (b *Bucket) getLast(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	inbox, err := jsinbox.For(b.js.Conn())
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", b.name, err)
	}
	m, err := inbox.GetLast(ctx, jsinbox.APIPrefix(b.js), b.Stream(), subject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, jetstream.ErrKeyNotFound
	case errors.Is(err, jsinbox.ErrForgedHeader):
		return nil, fmt.Errorf("bucket %s: %s: %w: %w", b.name, subject, ErrNotWritten, err)
	case err != nil:
		return nil, fmt.Errorf("bucket %s: %s: %w", b.name, subject, err)
	}
	if !jsinbox.Marked(m) {
		return nil, fmt.Errorf("bucket %s: %s (revision %d): %w: it carries no %s header naming its subject", b.name, subject, m.Sequence, ErrNotWritten, jsinbox.SubjectMark)
	}
	return m, nil
}

// Put stores value on key, whatever the key holds, and returns its
// revision.
func (b *Bucket) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	return b.publish(ctx, key, value)
}

// Create stores value on key only if the key has never held a value (or
// its last one expired): [ErrConflict] otherwise.
func (b *Bucket) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	return b.publish(ctx, key, value, jetstream.WithExpectLastSequencePerSubject(0))
}

// Update stores value on key only if the key's last value is still the
// one of revision rev: [ErrConflict] otherwise (someone wrote since).
func (b *Bucket) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return b.publish(ctx, key, value, jetstream.WithExpectLastSequencePerSubject(rev))
}

func (b *Bucket) publish(ctx context.Context, key string, value []byte, opts ...jetstream.PublishOpt) (uint64, error) {
	if err := validKey(key); err != nil {
		return 0, fmt.Errorf("bucket %s: %w", b.name, err)
	}
	subj := b.Subject(key)
	m := &nats.Msg{Subject: subj, Data: value, Header: nats.Header{}}
	jsinbox.Mark(m.Header, subj)
	ack, err := b.js.PublishMsg(ctx, m, opts...)
	if err != nil {
		var apiErr *jetstream.APIError
		// nats.go documents 10164 for a replicated stream (the servers
		// tested here answer 10071 there too).
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return 0, fmt.Errorf("bucket %s: %s: %w", b.name, key, ErrConflict)
		}
		return 0, fmt.Errorf("bucket %s: put %s: %w", b.name, key, err)
	}
	return ack.Sequence, nil
}

// validKey refuses what is not a KV key: a subject's tokens (no wildcard,
// no space or control), of the characters a KV key may hold, none empty.
func validKey(key string) error {
	if key == "" || key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return fmt.Errorf("invalid key %q: empty, or an empty token", key)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '/', c == '_', c == '=', c == '.':
		default:
			return fmt.Errorf("invalid key %q: byte %d (%q) is not a letter, digit, or one of - / _ = .", key, i, c)
		}
	}
	return nil
}
