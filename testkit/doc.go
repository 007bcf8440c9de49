// Package testkit helps consumers and Arbiter's own tests: an embedded
// JetStream (one server or a cluster) in a temporary directory, policy tables
// checked through the runtime's own argument checks, generated requests that
// hold an outcome off a class of tools, scripted agents and counting tools.
//
// It is for tests only; nothing in a production path imports it.
package testkit
