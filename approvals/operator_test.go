package approvals_test

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/arbiter-run/arbiter/approvals"
	"github.com/arbiter-run/arbiter/events"
	"github.com/nats-io/nkeys"
)

// newOperator returns an operator key pair and its public key.
func newOperator(t testing.TB) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatalf("create operator key: %v", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatalf("operator public key: %v", err)
	}
	return kp, pub
}

// signedAt is a fixed signing time with nanoseconds, so a lost digit shows.
var signedAt = time.Date(2030, time.March, 4, 5, 6, 7, 891011121, time.UTC)

const (
	testRun      = "run-1"
	testApproval = "01JAPPROVAL0000000000000000"
	testHash     = "3b2652ed7e6578da225cd8ce1e9d2d597e045baa6ae27cb4724f5dbe71266796"
)

// signGrant signs a grant of testApproval on testRun with kp.
func signGrant(t testing.TB, kp nkeys.KeyPair, decision string) events.DecisionBody {
	t.Helper()
	d, err := approvals.Sign(kp, testRun, testApproval, testHash, decision, "looks right", signedAt)
	if err != nil {
		t.Fatalf("sign %s: %v", decision, err)
	}
	return d
}

func TestSign_RecordsWhoWhatAndWhen(t *testing.T) {
	kp, pub := newOperator(t)
	d := signGrant(t, kp, events.DecisionGrant)
	want := events.DecisionBody{
		Approval: testApproval, Hash: testHash, Decision: events.DecisionGrant, Operator: pub,
		Reason: "looks right", Signed: signedAt, Signature: d.Signature,
	}
	if d != want {
		t.Errorf("Sign = %+v, want %+v", d, want)
	}
	sig, err := base64.RawURLEncoding.DecodeString(d.Signature)
	if err != nil {
		t.Fatalf("signature %q is not base64url: %v", d.Signature, err)
	}
	if got := len(sig); got != 64 {
		t.Errorf("signature is %d bytes, want 64 (ed25519)", got)
	}
}

func TestVerify_ValidGrantAndDenial(t *testing.T) {
	kp, pub := newOperator(t)
	ops := approvals.Operators{pub: "alice"}
	for _, decision := range []string{events.DecisionGrant, events.DecisionDeny} {
		d := signGrant(t, kp, decision)
		if err := approvals.Verify(ops, testRun, d); err != nil {
			t.Errorf("Verify(%s) = %v, want nil", decision, err)
		}
	}
}

// TestVerify_SurvivesTheLog checks that a decision still verifies after the
// JSON round trip it makes through an event, and whatever zone its time is
// read in: what is signed is the instant, in UTC.
func TestVerify_SurvivesTheLog(t *testing.T) {
	kp, pub := newOperator(t)
	ops := approvals.Operators{pub: "alice"}
	d := signGrant(t, kp, events.DecisionGrant)
	ev, err := events.New(testRun, events.ApprovalGranted, d)
	if err != nil {
		t.Fatalf("new event: %v", err)
	}
	back, err := events.DecodeBody[events.DecisionBody](ev)
	if err != nil {
		t.Fatalf("decode body: %v", err)
	}
	if err := approvals.Verify(ops, testRun, back); err != nil {
		t.Errorf("Verify after a JSON round trip = %v, want nil", err)
	}
	back.Signed = back.Signed.In(time.FixedZone("UTC+5", 5*3600))
	if err := approvals.Verify(ops, testRun, back); err != nil {
		t.Errorf("Verify with the time in another zone = %v, want nil", err)
	}
}

func TestVerify_TamperedFieldFails(t *testing.T) {
	kp, pub := newOperator(t)
	_, other := newOperator(t)
	ops := approvals.Operators{pub: "alice", other: "bob"}
	tests := []struct {
		name   string
		run    string
		tamper func(*events.DecisionBody)
	}{
		{"run", "run-2", func(*events.DecisionBody) {}},
		{"approval", testRun, func(d *events.DecisionBody) { d.Approval = "01JAPPROVAL0000000000000001" }},
		{"hash", testRun, func(d *events.DecisionBody) {
			d.Hash = "4b2652ed7e6578da225cd8ce1e9d2d597e045baa6ae27cb4724f5dbe71266796"
		}},
		{"decision", testRun, func(d *events.DecisionBody) { d.Decision = events.DecisionDeny }},
		{"reason", testRun, func(d *events.DecisionBody) { d.Reason = "looks right!" }},
		{"signed time", testRun, func(d *events.DecisionBody) { d.Signed = d.Signed.Add(time.Nanosecond) }},
		{"operator (another configured one)", testRun, func(d *events.DecisionBody) { d.Operator = other }},
		{"signature bit", testRun, func(d *events.DecisionBody) {
			sig, _ := base64.RawURLEncoding.DecodeString(d.Signature)
			sig[10] ^= 1
			d.Signature = base64.RawURLEncoding.EncodeToString(sig)
		}},
		{"signature cut", testRun, func(d *events.DecisionBody) { d.Signature = d.Signature[:40] }},
		{"signature empty", testRun, func(d *events.DecisionBody) { d.Signature = "" }},
		{"signature not base64url", testRun, func(d *events.DecisionBody) { d.Signature = "not base64!*" }},
		{"signature std base64", testRun, func(d *events.DecisionBody) {
			sig, _ := base64.RawURLEncoding.DecodeString(d.Signature)
			d.Signature = base64.StdEncoding.EncodeToString(sig)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := signGrant(t, kp, events.DecisionGrant)
			tt.tamper(&d)
			err := approvals.Verify(ops, tt.run, d)
			if !errors.Is(err, approvals.ErrBadSignature) {
				t.Errorf("Verify after tampering with %s = %v, want %v", tt.name, err, approvals.ErrBadSignature)
			}
		})
	}
}

// TestVerify_FieldsDoNotRunTogether moves characters between two signed
// fields; the netstring framing keeps the signed bytes apart.
func TestVerify_FieldsDoNotRunTogether(t *testing.T) {
	kp, pub := newOperator(t)
	ops := approvals.Operators{pub: "alice"}
	d, err := approvals.Sign(kp, testRun, testApproval, testHash, events.DecisionGrant, "ok", signedAt)
	if err != nil {
		t.Fatal(err)
	}
	d.Approval, d.Hash = testApproval+testHash[:1], testHash[1:]
	if err := approvals.Verify(ops, testRun, d); !errors.Is(err, approvals.ErrBadSignature) {
		t.Errorf("Verify with a byte moved from hash to approval = %v, want %v", err, approvals.ErrBadSignature)
	}
}

func TestVerify_UnknownOperator(t *testing.T) {
	kp, _ := newOperator(t)
	_, configured := newOperator(t)
	ops := approvals.Operators{configured: "alice"}
	d := signGrant(t, kp, events.DecisionGrant)
	if err := approvals.Verify(ops, testRun, d); !errors.Is(err, approvals.ErrUnknownOperator) {
		t.Errorf("Verify by an unconfigured key = %v, want %v", err, approvals.ErrUnknownOperator)
	}
	if err := approvals.Verify(nil, testRun, d); !errors.Is(err, approvals.ErrUnknownOperator) {
		t.Errorf("Verify with no operators = %v, want %v", err, approvals.ErrUnknownOperator)
	}
	// A configured entry that is not a public key verifies nothing.
	d.Operator = "not-a-key"
	ops["not-a-key"] = "typo"
	if err := approvals.Verify(ops, testRun, d); !errors.Is(err, approvals.ErrUnknownOperator) {
		t.Errorf("Verify naming a malformed configured key = %v, want %v", err, approvals.ErrUnknownOperator)
	}
}

// TestVerify_ForgedOperatorField claims a trusted operator's key on a
// decision signed by someone else.
func TestVerify_ForgedOperatorField(t *testing.T) {
	mallory, _ := newOperator(t)
	_, alice := newOperator(t)
	ops := approvals.Operators{alice: "alice"}
	d := signGrant(t, mallory, events.DecisionGrant)
	d.Operator = alice
	if err := approvals.Verify(ops, testRun, d); !errors.Is(err, approvals.ErrBadSignature) {
		t.Errorf("Verify of mallory's signature claiming alice = %v, want %v", err, approvals.ErrBadSignature)
	}
}

func TestSign_RefusesOtherDecisions(t *testing.T) {
	kp, _ := newOperator(t)
	for _, decision := range []string{"", "approve", "GRANT", "granted", "deny "} {
		_, err := approvals.Sign(kp, testRun, testApproval, testHash, decision, "", signedAt)
		if !errors.Is(err, approvals.ErrBadDecision) {
			t.Errorf("Sign(%q) = %v, want %v", decision, err, approvals.ErrBadDecision)
		}
	}
}

func TestSign_NeedsAPrivateKey(t *testing.T) {
	_, pub := newOperator(t)
	public, err := nkeys.FromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := approvals.Sign(public, testRun, testApproval, testHash, events.DecisionGrant, "", signedAt); err == nil {
		t.Error("Sign with a public key only = nil error, want an error")
	}
}

func TestVerify_RefusesOtherDecisions(t *testing.T) {
	kp, pub := newOperator(t)
	ops := approvals.Operators{pub: "alice"}
	d := signGrant(t, kp, events.DecisionGrant)
	for _, decision := range []string{"", "approve", "Grant"} {
		d.Decision = decision
		if err := approvals.Verify(ops, testRun, d); !errors.Is(err, approvals.ErrBadDecision) {
			t.Errorf("Verify(decision %q) = %v, want %v", decision, err, approvals.ErrBadDecision)
		}
	}
}

func TestParseOperator(t *testing.T) {
	kp, pub := newOperator(t)
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	apub, _ := account.PublicKey()
	tests := []struct {
		name, key string
		ok        bool
	}{
		{"user public key", pub, true},
		{"user seed", string(seed), false},
		{"account key", apub, false},
		{"empty", "", false},
		{"garbage", "Unot-a-key", false},
		{"one character off", pub[:len(pub)-1] + flip(pub[len(pub)-1]), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := approvals.ParseOperator(tt.key)
			if got := err == nil; got != tt.ok {
				t.Errorf("ParseOperator(%.12q…) = %v, want ok %v", tt.key, err, tt.ok)
			}
		})
	}
}

func flip(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}

// Known answer for a signed decision (docs/adr/0005-operator-identity.md):
// the nkeys user key made from the raw ed25519 seed 0x00 0x01 … 0x1f signs
// the netstrings
//
//	19:arbiter.decision.v1,5:run-1,27:01JAPPROVAL0000000000000000,64:3b2652ed7e6578da225cd8ce1e9d2d597e045baa6ae27cb4724f5dbe71266796,5:grant,56:UAB2CB576PHBBPQ5ODORRZ2LYCMWPZGWGCN2KDK7DXOIMZASKUY3RLKK,30:2030-03-04T05:06:07.891011121Z,11:looks right,
//
// and ed25519 is deterministic, so the signature is fixed. Both were checked
// independently (Python's cryptography package).
const (
	katPublic    = "UAB2CB576PHBBPQ5ODORRZ2LYCMWPZGWGCN2KDK7DXOIMZASKUY3RLKK"
	katSignature = "muBy_HZlokJ4TgmGZPc4vkVKPOdNkOqPS8yZlCQFepjfPKgSxEzylYCe2_7iG8tw1-JjXPH-YtHgbK37bL8MDQ"
)

func TestSign_KnownAnswer(t *testing.T) {
	raw := make([]byte, 32)
	for i := range raw {
		raw[i] = byte(i)
	}
	kp, err := nkeys.FromRawSeed(nkeys.PrefixByteUser, raw)
	if err != nil {
		t.Fatal(err)
	}
	d := signGrant(t, kp, events.DecisionGrant)
	if d.Operator != katPublic {
		t.Errorf("operator = %s, want %s", d.Operator, katPublic)
	}
	if d.Signature != katSignature {
		t.Errorf("signature = %s, want %s", d.Signature, katSignature)
	}
	if err := approvals.Verify(approvals.Operators{katPublic: "kat"}, testRun, d); err != nil {
		t.Errorf("Verify(known answer) = %v, want nil", err)
	}
}
