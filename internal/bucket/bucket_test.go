package bucket_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/arbiter-run/arbiter/internal/bucket"
	"github.com/arbiter-run/arbiter/internal/jsinbox"
	"github.com/arbiter-run/arbiter/testkit"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func open(t *testing.T, js jetstream.JetStream, replicas int) *bucket.Bucket {
	t.Helper()
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "B", History: 1, Replicas: replicas}); err != nil {
		t.Fatal(err)
	}
	return bucket.New(js, "B")
}

// TestBucket_WritesAndCompareAndSet: a value put is read back with its
// revision; Create refuses a key that holds a value; Update refuses a
// revision that is no longer the last, on one server and on a replicated
// bucket.
func TestBucket_WritesAndCompareAndSet(t *testing.T) {
	for _, replicas := range []int{1, 3} {
		t.Run(fmt.Sprintf("R%d", replicas), func(t *testing.T) {
			var js jetstream.JetStream
			if replicas == 1 {
				js = testkit.JetStream(t).JS
			} else {
				js = testkit.ConnectCluster(t, testkit.Cluster(t, 3)).JS
			}
			b := open(t, js, replicas)
			ctx := t.Context()
			if _, err := b.Get(ctx, "k"); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("get of a key never written: %v, want %v", err, jetstream.ErrKeyNotFound)
			}
			rev, err := b.Create(ctx, "k", []byte("1"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Create(ctx, "k", []byte("1")); !errors.Is(err, bucket.ErrConflict) {
				t.Fatalf("a second create: %v, want %v", err, bucket.ErrConflict)
			}
			e, err := b.Get(ctx, "k")
			if err != nil || string(e.Value) != "1" || e.Revision != rev || e.Key != "k" {
				t.Fatalf("get: %+v, %v; want 1 at revision %d", e, err, rev)
			}
			rev2, err := b.Update(ctx, "k", []byte("2"), rev)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Update(ctx, "k", []byte("3"), rev); !errors.Is(err, bucket.ErrConflict) {
				t.Fatalf("an update from a stale revision: %v, want %v", err, bucket.ErrConflict)
			}
			if e, err := b.GetSubject(ctx, b.Subject("k")); err != nil || string(e.Value) != "2" || e.Revision != rev2 {
				t.Fatalf("get by subject: %+v, %v; want 2 at revision %d", e, err, rev2)
			}
			if _, err := b.Put(ctx, "k", []byte("9")); err != nil {
				t.Fatal(err)
			}
			if e, err := b.Get(ctx, "k"); err != nil || string(e.Value) != "9" {
				t.Fatalf("after a put: %+v, %v", e, err)
			}
		})
	}
}

// TestBucket_BelievesOnlyItsWriters: what a key holds is refused, naming
// the key, unless it carries the writer's mark for that very key and none
// of the headers only the server sets: a value put by the KV client (as
// an older version, another tool or a relayed reply stores one), a mark
// naming another key, two marks, and a message that claims the server's
// headers. The same bytes written through the bucket are read.
func TestBucket_BelievesOnlyItsWriters(t *testing.T) {
	env := testkit.JetStream(t)
	b := open(t, env.JS, 1)
	ctx := t.Context()
	kv, err := env.JS.KeyValue(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "plain", []byte("0")); err != nil {
		t.Fatal(err)
	}
	raw := func(key string, h nats.Header) {
		t.Helper()
		if _, err := env.JS.PublishMsg(ctx, &nats.Msg{Subject: b.Subject(key), Data: []byte("0"), Header: h}); err != nil {
			t.Fatal(err)
		}
	}
	raw("other", nats.Header{jsinbox.SubjectMark: {b.Subject("plain")}})
	raw("twice", nats.Header{jsinbox.SubjectMark: {b.Subject("twice"), b.Subject("twice")}})
	raw("claims", nats.Header{jsinbox.SubjectMark: {b.Subject("claims")}, jetstream.SequenceHeader: {"1"}})
	raw("lower", nats.Header{strings.ToLower(jsinbox.SubjectMark): {b.Subject("lower")}})
	for _, key := range []string{"plain", "other", "twice", "claims", "lower"} {
		_, err := b.Get(ctx, key)
		if !errors.Is(err, bucket.ErrNotWritten) || !strings.Contains(err.Error(), b.Subject(key)) {
			t.Errorf("%s: %v, want %v naming %s", key, err, bucket.ErrNotWritten, b.Subject(key))
		}
		if key == "claims" && !errors.Is(err, jsinbox.ErrForgedHeader) {
			t.Errorf("%s: %v, want it to say which header is the server's", key, err)
		}
		if _, err := b.Put(ctx, key, []byte("0")); err != nil {
			t.Fatal(err)
		}
		if e, err := b.Get(ctx, key); err != nil || string(e.Value) != "0" {
			t.Errorf("%s written through the bucket: %+v, %v", key, e, err)
		}
	}
}

// TestBucket_RefusesWhatIsNoKey: a key that is not a KV key (a space, a
// wildcard, an empty token) is refused before anything is sent, with the
// key named; so is a subject outside the bucket.
func TestBucket_RefusesWhatIsNoKey(t *testing.T) {
	env := testkit.JetStream(t)
	b := open(t, env.JS, 1)
	ctx := t.Context()
	for _, key := range []string{"", "a b", "a.*", "a.>", ".a", "a.", "a..b", "a\r\nPUB x 1"} {
		if _, err := b.Put(ctx, key, nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", key)) {
			t.Errorf("put %q: %v, want refused naming it", key, err)
		}
		if _, err := b.Get(ctx, key); err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("get %q: %v, want refused", key, err)
		}
	}
	if _, err := b.GetSubject(ctx, "$KV.OTHER.k"); err == nil || !strings.Contains(err.Error(), "not one of the bucket's") {
		t.Errorf("a subject of another bucket: %v", err)
	}
}
