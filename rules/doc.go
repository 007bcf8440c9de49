// Package rules owns declarative policies: the rules file (YAML or JSON,
// held to its JSON Schema on load), its CEL conditions (compiled once, at
// load, under a cost limit), and [Policy], which decides a request by every
// rule that applies, deny winning, and falls through to a configured default
// for what no rule decides. It also owns the static analysis of a file
// ([Lint], [Diff]) and the case tables run against one ([RunCases]).
//
// Semantics: docs/adr/0016-declarative-policies.md. A rules policy is a pure
// function of the request and the run view: it must not read a clock (time
// is the time recorded with the step), touch the network, or execute
// anything.
package rules
