package epmetrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/inferpick/inferpick/picker/registry"
)

// Workers is the registry's read view.
type Workers interface {
	Workers() []*registry.Worker
}

// PoolCollector exports the upstream pool series, read from the registry at
// scrape time: the averages over the workers whose metrics are fresh
// (scraped within the staleness bound), as the upstream picker's, absent
// while none is; the ready workers, all of them (upstream counts only
// those with fresh metrics: here a pool whose pages cannot be read is not
// reported as having no endpoint, which it still routes to); each worker's
// queue as last scraped; and the prefix index's size when the policy keeps
// one.
type PoolCollector struct {
	pool      string
	workers   Workers
	indexSize func() (int, bool)
	staleness time.Duration
	clock     clock.PassiveClock

	kv, queue, running, ready, perPod, indexer *prometheus.Desc
}

var _ prometheus.Collector = (*PoolCollector)(nil)

// PoolOption configures a PoolCollector.
type PoolOption func(*PoolCollector)

// WithClock sets the clock that ages the workers' metrics (the real one by
// default).
func WithClock(c clock.PassiveClock) PoolOption { return func(p *PoolCollector) { p.clock = c } }

// NewPoolCollector returns a collector for the pool named pool. indexSize,
// when not nil, reports the prefix index's entries. Metrics scraped longer
// than staleness ago are not counted.
func NewPoolCollector(pool string, workers Workers, indexSize func() (int, bool), staleness time.Duration, opts ...PoolOption) *PoolCollector {
	name := []string{"name"}
	c := &PoolCollector{
		pool: pool, workers: workers, indexSize: indexSize, staleness: staleness, clock: clock.RealClock{},
		kv:      prometheus.NewDesc("inference_pool_average_kv_cache_utilization", "Mean KV-cache usage of the pool's model servers.", name, nil),
		queue:   prometheus.NewDesc("inference_pool_average_queue_size", "Mean requests waiting in the pool's model servers.", name, nil),
		running: prometheus.NewDesc("inference_pool_average_running_requests", "Mean requests running in the pool's model servers.", name, nil),
		ready:   prometheus.NewDesc("inference_pool_ready_pods", "Ready pods (endpoints) of the pool.", name, nil),
		perPod:  prometheus.NewDesc("inference_pool_per_pod_queue_size", "Requests waiting in each model server of the pool.", []string{"name", "model_server_pod"}, nil),
		indexer: prometheus.NewDesc("inference_extension_prefix_indexer_size", "Entries (prompt blocks) held by the prefix index.", nil, nil),
	}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *PoolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.kv
	ch <- c.queue
	ch <- c.running
	ch <- c.ready
	ch <- c.perPod
	ch <- c.indexer
}

// Collect implements prometheus.Collector.
func (c *PoolCollector) Collect(ch chan<- prometheus.Metric) {
	ws := c.workers.Workers()
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, float64(len(ws)), c.pool)
	now := c.clock.Now()
	var kv, queue, running float64
	fresh := 0
	for _, w := range ws {
		m := w.Metrics()
		if m == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.perPod, prometheus.GaugeValue, float64(m.Waiting), c.pool, endpointLabel(w.Endpoint()))
		if !m.Fresh(now, c.staleness) {
			continue
		}
		fresh++
		kv += m.KVUsage
		queue += float64(m.Waiting)
		running += float64(m.Running)
	}
	if fresh > 0 {
		n := float64(fresh)
		ch <- prometheus.MustNewConstMetric(c.kv, prometheus.GaugeValue, kv/n, c.pool)
		ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, queue/n, c.pool)
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, running/n, c.pool)
	}
	if c.indexSize != nil {
		if n, ok := c.indexSize(); ok {
			ch <- prometheus.MustNewConstMetric(c.indexer, prometheus.GaugeValue, float64(n))
		}
	}
}

// endpointLabel names a worker in model_server_pod as the upstream picker
// does: a pod's endpoint is "<pod>-rank-<rank>", one per target port, so a
// pod of several ports gives one series each. A static endpoint is its
// address.
func endpointLabel(ep registry.Endpoint) string {
	if ep.Namespace == "" {
		return ep.Name
	}
	return ep.Name + "-rank-" + strconv.Itoa(ep.Rank)
}
