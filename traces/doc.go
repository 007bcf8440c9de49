// Package traces turns the log into OpenTelemetry traces: one span per
// step of a run (its tool, outcome, policy id, and how long the agent's
// decision, the policy, the tool and the appends took), every span of a
// run in one trace whose id is derived from the run's id, so the steps a
// fleet's workers drove of one run line up in one trace whichever worker
// drove each.
//
// A [Tracer] reads the runs streams with batch direct gets from where it
// last read (no consumer) and builds the spans from the events' own times:
// the time a worker made each event, and the time the server stored it.
// It needs nothing from the workers, so tracing is off until a tracer is
// run, and the workers' Prometheus metrics are unchanged. It writes
// nothing on the log.
package traces
