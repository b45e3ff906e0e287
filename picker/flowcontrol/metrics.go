package flowcontrol

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// upstreamOutcomes maps outcomes to the values of the upstream EPP's
// request_queue_duration series.
var upstreamOutcomes = map[string]string{
	outcomeDispatched: "Dispatched",
	outcomeShed:       "RejectedCapacity",
	outcomeFull:       "RejectedCapacity",
	outcomeError:      "RejectedOther",
	outcomeTimeout:    "EvictedTTL",
	outcomeCancelled:  "EvictedContextCancelled",
	outcomeEvicted:    "EvictedOther",
}

type metrics struct {
	pool     string
	length   *prometheus.GaugeVec
	bytes    *prometheus.GaugeVec
	wait     *prometheus.HistogramVec
	outcomes *prometheus.CounterVec

	// The upstream EPP's flow-control series, same names and labels.
	upSize  *prometheus.GaugeVec
	upBytes *prometheus.GaugeVec
	upWait  *prometheus.HistogramVec
}

var upstreamLabels = []string{"fairness_id", "priority", "inference_pool", "model_name", "target_model_name"}

func newMetrics(reg prometheus.Registerer, pool string) *metrics {
	m := &metrics{
		pool: pool,
		length: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inferpick_flowcontrol_queue_length",
			Help: "Requests waiting in the flow-control queue, by priority.",
		}, []string{"priority"}),
		bytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "inferpick_flowcontrol_queue_bytes",
			Help: "Request bytes held by waiters of the flow-control queue, by priority.",
		}, []string{"priority"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "inferpick_flowcontrol_wait_seconds",
			Help:    "Time requests spent in the flow-control queue, by priority and outcome.",
			Buckets: prometheus.ExponentialBuckets(1e-3, 2, 16),
		}, []string{"priority", "outcome"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inferpick_flowcontrol_requests_total",
			Help: "Requests that went through flow control, by how they left it.",
		}, []string{"priority", "outcome"}),
		upSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "inference_extension",
			Name:      "flow_control_queue_size",
			Help:      "Requests held in the flow-control queue.",
		}, upstreamLabels),
		upBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Subsystem: "inference_extension",
			Name:      "flow_control_queue_bytes",
			Help:      "Request bytes held in the flow-control queue.",
		}, upstreamLabels),
		upWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "inference_extension",
			Name:      "flow_control_request_queue_duration_seconds",
			Help:      "Time from entering flow control to the request's outcome.",
			Buckets:   []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"fairness_id", "priority", "outcome", "inference_pool", "model_name", "target_model_name"}),
	}
	if reg != nil {
		reg.MustRegister(m.length, m.bytes, m.wait, m.outcomes, m.upSize, m.upBytes, m.upWait)
	}
	return m
}

func (m *metrics) queued(it Item, sign float64) {
	p := strconv.Itoa(it.Priority)
	m.length.WithLabelValues(p).Add(sign)
	m.bytes.WithLabelValues(p).Add(sign * float64(it.Bytes))
	m.upSize.WithLabelValues(it.FlowID, p, m.pool, it.Model, it.TargetModel).Add(sign)
	m.upBytes.WithLabelValues(it.FlowID, p, m.pool, it.Model, it.TargetModel).Add(sign * float64(it.Bytes))
}

func (m *metrics) done(it Item, outcome string, waited float64) {
	p := strconv.Itoa(it.Priority)
	m.outcomes.WithLabelValues(p, outcome).Inc()
	m.wait.WithLabelValues(p, outcome).Observe(waited)
	m.upWait.WithLabelValues(it.FlowID, p, upstreamOutcomes[outcome], m.pool, it.Model, it.TargetModel).Observe(waited)
}

// forget drops the per-flow upstream series of a flow that has no waiters
// left, so fairness ids seen once do not stay exported forever.
func (m *metrics) forget(it Item) {
	p := strconv.Itoa(it.Priority)
	m.upSize.DeleteLabelValues(it.FlowID, p, m.pool, it.Model, it.TargetModel)
	m.upBytes.DeleteLabelValues(it.FlowID, p, m.pool, it.Model, it.TargetModel)
}
