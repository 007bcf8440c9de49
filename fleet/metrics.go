package fleet

import (
	"time"

	"github.com/arbiter-run/arbiter/events"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a worker's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	Steps          prometheus.Counter
	Outcomes       *prometheus.CounterVec
	AppendSeconds  prometheus.Histogram
	AppendErrors   prometheus.Counter
	Conflicts      prometheus.Counter
	RunsInFlight   prometheus.Gauge
	ApprovalEvents *prometheus.CounterVec
	// RunsStalled counts the runs whose last drive on this worker failed
	// (an append the server did not take, a read that failed): they are
	// retried with a growing delay, and their agent is not asked again
	// for a step it already answered.
	RunsStalled prometheus.Gauge
	// Unloadable counts nudges for runs whose events do not verify or
	// fold: those runs are never driven.
	Unloadable prometheus.Counter
	// NoAgent counts runs failed because no worker offers their agent.
	NoAgent prometheus.Counter
}

// NewMetrics registers a worker's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Steps:          prometheus.NewCounter(prometheus.CounterOpts{Name: "arbiter_steps_total", Help: "Steps decided (step.decided events appended)."}),
		Outcomes:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "arbiter_policy_outcomes_total", Help: "Policy results recorded, by outcome."}, []string{"outcome"}),
		AppendSeconds:  prometheus.NewHistogram(prometheus.HistogramOpts{Name: "arbiter_append_seconds", Help: "Latency of fenced appends.", Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16)}),
		AppendErrors:   prometheus.NewCounter(prometheus.CounterOpts{Name: "arbiter_append_errors_total", Help: "Appends that failed (conflicts included)."}),
		Conflicts:      prometheus.NewCounter(prometheus.CounterOpts{Name: "arbiter_conflicts_total", Help: "Runs dropped because another writer moved them."}),
		RunsInFlight:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "arbiter_runs_in_flight", Help: "Runs this worker is driving now."}),
		ApprovalEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "arbiter_approval_events_total", Help: "Approval events this worker appended, by kind (requested, expired, refused)."}, []string{"kind"}),
		RunsStalled:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "arbiter_runs_stalled", Help: "Runs whose last drive on this worker failed and that wait to be retried with backoff."}),
		Unloadable:     prometheus.NewCounter(prometheus.CounterOpts{Name: "arbiter_runs_unloadable_total", Help: "Nudges for runs whose events do not verify or fold (never driven)."}),
		NoAgent:        prometheus.NewCounter(prometheus.CounterOpts{Name: "arbiter_runs_no_agent_total", Help: "Runs failed because no worker of the fleet offers their agent."}),
	}
	reg.MustRegister(m.Steps, m.Outcomes, m.AppendSeconds, m.AppendErrors, m.Conflicts, m.RunsInFlight, m.ApprovalEvents, m.RunsStalled, m.Unloadable, m.NoAgent)
	return m
}

// OnAppend is a driver.Config.OnAppend hook that records appends.
func (m *Metrics) OnAppend(k events.Kind, body any, took time.Duration, err error) {
	if m == nil {
		return
	}
	m.AppendSeconds.Observe(took.Seconds())
	if err != nil {
		m.AppendErrors.Inc()
		return
	}
	switch k {
	case events.StepDecided:
		m.Steps.Inc()
		if b, ok := body.(events.StepDecidedBody); ok && b.Policy != nil {
			m.Outcomes.WithLabelValues(string(b.Policy.Outcome)).Inc()
		}
	case events.StepPolicy, events.ApprovalRequested:
		if b, ok := body.(events.PolicyBody); ok {
			m.Outcomes.WithLabelValues(string(b.Outcome)).Inc()
		}
	}
	switch k {
	case events.ApprovalRequested, events.ApprovalExpired, events.ApprovalRefused:
		m.ApprovalEvents.WithLabelValues(string(k)).Inc()
	}
}

func (m *Metrics) inFlight(d float64) {
	if m != nil {
		m.RunsInFlight.Add(d)
	}
}

func (m *Metrics) conflict() {
	if m != nil {
		m.Conflicts.Inc()
	}
}

func (m *Metrics) stalled(d float64) {
	if m != nil {
		m.RunsStalled.Add(d)
	}
}

func (m *Metrics) unloadable() {
	if m != nil {
		m.Unloadable.Inc()
	}
}

func (m *Metrics) noAgent() {
	if m != nil {
		m.NoAgent.Inc()
	}
}
