// Package console is the operator's web console: a local HTTP server that
// lists runs, shows one run (its trace, hash chain, tool specs, steps and
// approvals), follows pending approvals live, and signs an operator's
// grant or denial in its own process, with the operator's key, exactly as
// `arbiter grant` does.
//
// It reads runs only with direct gets ([events.Log.Read] and batch direct
// gets of its own index, see [Server.List]); it creates no consumer and
// writes nothing on a run: a decision is published on the decisions stream
// ([approvals.Publish]) and the fleet is nudged, and a worker verifies and
// records it (ADR 0007).
//
// Everything a model chose (arguments, presentations, results, reasons) is
// hostile text: templates render it as text, never markup, under a strict
// Content Security Policy with no inline script. Access needs the random
// token printed at start; every decision needs the page's CSRF token.
package console
