package extproc

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Release reasons, the label of inferpick_guard_releases_total.
const (
	reasonCompleted = "completed"          // the response ended ([DONE] or end of stream)
	reasonCancelled = "cancelled"          // the gateway closed the stream early (client gone)
	reasonError     = "error"              // upstream error status, or a protocol error
	reasonPanic     = "panic"              // the handler panicked
	reasonFallback  = "fallback"           // the gateway served another endpoint of the list
	reasonViolation = "protocol_violation" // the peer broke the ext_proc protocol
	reasonPrefilled = "prefilled"          // the prefill pod's part ended: the decode pod answered
	reasonEncoded   = "encoded"            // the encode pod's part ended: the decode pod answered
)

type serverMetrics struct {
	requests   *prometheus.CounterVec
	pick       prometheus.Histogram
	releases   *prometheus.CounterVec
	ttft       prometheus.Histogram
	violations *prometheus.CounterVec
	buffered   prometheus.GaugeFunc
	budget     prometheus.Gauge

	unknownObjectives prometheus.Counter
	codes             map[int]prometheus.Counter
}

func newServerMetrics(reg prometheus.Registerer, budget *bodyBudget) *serverMetrics {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferpick_requests_total",
			Help: "Requests handled, by the HTTP status the picker decided (200 when routed).",
		}, []string{"code"}),
		pick: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "inferpick_pick_duration_seconds",
			Help:    "Time from the end of the request body to the routing decision (parse, the prompt's lookup and pick; not the wait in the flow-control queue).",
			Buckets: prometheus.ExponentialBuckets(1e-6, 2, 20),
		}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferpick_guard_releases_total",
			Help: "Load guards released, by the reason the request stopped counting.",
		}, []string{"reason"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "inferpick_time_to_first_token_seconds",
			Help:    "Time from routing to the first token seen on the response: its first streamed token, or the headers of a reply sent whole.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16),
		}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferpick_protocol_violations_total",
			Help: "ext_proc streams ended because a message came that the stream's state does not accept, by message and state.",
		}, []string{"message", "state"}),
		buffered: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "inferpick_request_body_buffered_bytes",
			Help: "Bytes of request bodies buffered across all streams (reserved from the body budget).",
		}, func() float64 { return float64(budget.Used()) }),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "inferpick_request_body_budget_bytes",
			Help: "The budget for request bodies buffered across all streams (--max-buffered-body-bytes).",
		}),
		unknownObjectives: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "inferpick_unknown_objectives_total",
			Help: "Requests naming an InferenceObjective the picker does not know; they get priority 0.",
		}),
		codes: map[int]prometheus.Counter{},
	}
	m.budget.Set(float64(budget.limit))
	for _, code := range []int{200, 400, 413, 429, 500, 503} {
		m.codes[code] = m.requests.WithLabelValues(strconv.Itoa(code))
	}
	for _, r := range []string{reasonCompleted, reasonCancelled, reasonError, reasonPanic, reasonFallback, reasonViolation, reasonPrefilled, reasonEncoded} {
		m.releases.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.pick, m.releases, m.ttft, m.violations, m.buffered, m.budget, m.unknownObjectives)
	}
	return m
}

func (m *serverMetrics) request(code int) {
	if c, ok := m.codes[code]; ok {
		c.Inc()
		return
	}
	m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
}

func (m *serverMetrics) violation(v *violation) {
	m.violations.WithLabelValues(v.msg.String(), v.state.String()).Inc()
}
