// Package gate puts Arbiter's decision in front of a program that keeps its
// own loop: the program opens a run, asks the gate before each tool call it
// is about to make, runs the call itself when the gate allows it, and
// reports the result.
//
// A gate run is an ordinary driver run. Its agent is fed by the program's
// calls, and its tools are proxies: when the driver executes a proxy (the
// write-ahead allow is stored), the proxy hands "allow" back to
// [Run.Ask] and waits for [Run.Report]; the result reported is the
// observation. A caller that runs the call at once (the gateway) uses
// [Run.Call] instead: the drive runs on the caller's goroutine and the
// proxy runs the caller's function there, after the allow is stored, so
// a call costs no hand-off between goroutines. Denials, approvals, grants, expiry and crash recovery are the
// driver's, unchanged, so every guarantee of a driven run holds: a grant is
// consumed by one fenced append, a resumed step is checked again, and the
// run replays.
//
// The package must not decide anything itself (the driver and its policy
// do), and must not execute any tool: the program does (for a Call, the
// function the program handed in).
package gate
