package flowcontrol

import (
	"strconv"
	"sync"

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
	upSize    *prometheus.GaugeVec
	upBytes   *prometheus.GaugeVec
	upWait    *prometheus.HistogramVec
	upEnqueue *prometheus.HistogramVec
	upCycle   prometheus.Histogram

	// Fairness ids come from a request header: the first maxFlows get
	// series of their own, the rest share otherFlow. live counts the
	// waiters behind each queue-size series, which goes once none is left.
	mu    sync.Mutex
	flows map[string]struct{}
	live  map[sizeKey]int
}

// sizeKey is the labels of a queue-size series.
type sizeKey struct {
	flow, priority, model, target string
}

const (
	maxFlows  = 256
	otherFlow = "__other__"
)

// outcomeQueued is the upstream enqueue outcome of a request that entered
// the queue: it has no outcome yet.
const outcomeQueued = "NotYetFinalized"

// upstreamFastBuckets are the upstream EPP's buckets of its enqueue and
// dispatch-cycle durations.
var upstreamFastBuckets = []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1}

var upstreamLabels = []string{"fairness_id", "priority", "inference_pool", "model_name", "target_model_name"}

// newMetrics returns the queue's series. saturation, when not nil, is read
// at scrape time for the upstream pool-saturation gauge.
func newMetrics(reg prometheus.Registerer, pool string, saturation func() float64) *metrics {
	m := &metrics{
		pool:  pool,
		flows: map[string]struct{}{},
		live:  map[sizeKey]int{},
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
		upEnqueue: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "inference_extension",
			Name:      "flow_control_request_enqueue_duration_seconds",
			Help:      "Time taken to put a request in the flow-control queue or turn it away, by whether it was queued.",
			Buckets:   upstreamFastBuckets,
		}, []string{"fairness_id", "priority", "outcome"}),
		upCycle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "inference_extension",
			Name:      "flow_control_dispatch_cycle_duration_seconds",
			Help:      "Time taken by one dispatch round of the flow-control queue.",
			Buckets:   upstreamFastBuckets,
		}),
	}
	if reg != nil {
		reg.MustRegister(m.length, m.bytes, m.wait, m.outcomes, m.upSize, m.upBytes, m.upWait, m.upEnqueue, m.upCycle)
		if saturation != nil {
			reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Subsystem:   "inference_extension",
				Name:        "flow_control_pool_saturation",
				Help:        "Saturation of the pool's endpoints: 0 idle, 1 every endpoint saturated.",
				ConstLabels: prometheus.Labels{"inference_pool": pool},
			}, saturation))
		}
	}
	return m
}

// flow returns the fairness_id label of id.
func (m *metrics) flow(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.flows[id]; ok {
		return id
	}
	if len(m.flows) >= maxFlows {
		return otherFlow
	}
	m.flows[id] = struct{}{}
	return id
}

// queued counts a waiter in (sign 1) or out (-1). The upstream queue-size
// and bytes series of its labels are deleted once no waiter of them is
// left, so that fairness ids and models seen once do not stay exported.
func (m *metrics) queued(it Item, sign float64) {
	p := strconv.Itoa(it.Priority)
	m.length.WithLabelValues(p).Add(sign)
	m.bytes.WithLabelValues(p).Add(sign * float64(it.Bytes))
	k := sizeKey{m.flow(it.FlowID), p, it.Model, it.TargetModel}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[k] += int(sign)
	if m.live[k] <= 0 {
		delete(m.live, k)
		m.upSize.DeleteLabelValues(k.flow, p, m.pool, k.model, k.target)
		m.upBytes.DeleteLabelValues(k.flow, p, m.pool, k.model, k.target)
		return
	}
	m.upSize.WithLabelValues(k.flow, p, m.pool, k.model, k.target).Add(sign)
	m.upBytes.WithLabelValues(k.flow, p, m.pool, k.model, k.target).Add(sign * float64(it.Bytes))
}

func (m *metrics) done(it Item, outcome string, waited float64) {
	p := strconv.Itoa(it.Priority)
	m.outcomes.WithLabelValues(p, outcome).Inc()
	m.wait.WithLabelValues(p, outcome).Observe(waited)
	m.upWait.WithLabelValues(m.flow(it.FlowID), p, upstreamOutcomes[outcome], m.pool, it.Model, it.TargetModel).Observe(waited)
}

// enqueued records how long it took to queue a request or turn it away;
// outcome is an upstream outcome, or outcomeQueued.
func (m *metrics) enqueued(it Item, outcome string, took float64) {
	m.upEnqueue.WithLabelValues(m.flow(it.FlowID), strconv.Itoa(it.Priority), outcome).Observe(took)
}
