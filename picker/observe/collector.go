package observe

import (
	"github.com/prometheus/client_golang/prometheus"
)

// WorkerCollector exports each worker's in-flight load and scraped state,
// read from the registry at scrape time: a worker that left the registry
// has no series. A parked worker (its pod unready) keeps its series, with
// inferpick_worker_parked 1.
type WorkerCollector struct {
	reg      Workers
	inflight *prometheus.Desc
	waiting  *prometheus.Desc
	kv       *prometheus.Desc
	parked   *prometheus.Desc
	workers  *prometheus.Desc
}

var _ prometheus.Collector = (*WorkerCollector)(nil)

// NewWorkerCollector returns a collector over reg.
func NewWorkerCollector(reg Workers) *WorkerCollector {
	labels := []string{"worker", "address"}
	return &WorkerCollector{
		reg: reg,
		inflight: prometheus.NewDesc("inferpick_worker_inflight_requests",
			"Requests in flight on a worker, counted by load guards, by phase.", append(labels, "phase"), nil),
		waiting: prometheus.NewDesc("inferpick_worker_waiting_requests",
			"Requests queued in the worker's model server, as last scraped.", labels, nil),
		kv: prometheus.NewDesc("inferpick_worker_kv_cache_usage_ratio",
			"KV-cache usage of the worker's model server, as last scraped.", labels, nil),
		parked: prometheus.NewDesc("inferpick_worker_parked",
			"1 while the worker is parked: its pod is unready, its server runs on, and it gets no picks until the pod is Ready again.", labels, nil),
		workers: prometheus.NewDesc("inferpick_workers",
			"Workers the picker may route to.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *WorkerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inflight
	ch <- c.waiting
	ch <- c.kv
	ch <- c.parked
	ch <- c.workers
}

// Collect implements prometheus.Collector.
func (c *WorkerCollector) Collect(ch chan<- prometheus.Metric) {
	live := 0
	for _, w := range c.reg.AllWorkers() {
		name, addr := w.Endpoint().Name, w.Address()
		parked := 0.0
		if w.Parked() {
			parked = 1
		} else {
			live++
		}
		ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, parked, name, addr)
		p, d := w.Load()
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(p), name, addr, "prefill")
		ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(d), name, addr, "decode")
		if m := w.Metrics(); m != nil {
			ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(m.Waiting), name, addr)
			ch <- prometheus.MustNewConstMetric(c.kv, prometheus.GaugeValue, m.KVUsage, name, addr)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(live))
}
