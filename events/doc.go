// Package events owns what a run is made of: the event envelope, the kinds of
// event a run's whole life needs, their subjects, their encoding, and the log
// on JetStream that appends them (fenced and idempotent) and reads them back.
//
// One transition of a run is one event, and one event is one JetStream
// message. Each event carries the SHA-256 of the run's previous event, so a
// run is a hash chain any reader can check with [VerifyChain].
//
// The package must not interpret events: deriving a run's status from its
// events is the projector's job, and deciding anything is the policy's. It
// imports nothing of Arbiter's but the JSON form and two internal packages:
// internal/layout (the names it stores under) and internal/jsinbox (the
// reply subscription its appends' acks and its batch reads share). The
// decisions stream it creates is published and read by internal/decisions;
// users decide through approvals or client (ADR 0020).
package events
