package epmetrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferpick/inferpick/picker/registry"
)

// Workers is the registry's read view.
type Workers interface {
	Workers() []*registry.Worker
}

// PoolCollector exports the upstream pool series, read from the registry at
// scrape time: averages over the workers whose model servers have been
// scraped, the ready workers, each worker's queue, and the prefix index's
// size when the policy keeps one.
type PoolCollector struct {
	pool      string
	workers   Workers
	indexSize func() (int, bool)

	kv, queue, running, ready, perPod, indexer *prometheus.Desc
}

var _ prometheus.Collector = (*PoolCollector)(nil)

// NewPoolCollector returns a collector for the pool named pool. indexSize,
// when not nil, reports the prefix index's entries.
func NewPoolCollector(pool string, workers Workers, indexSize func() (int, bool)) *PoolCollector {
	name := []string{"name"}
	return &PoolCollector{
		pool: pool, workers: workers, indexSize: indexSize,
		kv:      prometheus.NewDesc("inference_pool_average_kv_cache_utilization", "Mean KV-cache usage of the pool's model servers.", name, nil),
		queue:   prometheus.NewDesc("inference_pool_average_queue_size", "Mean requests waiting in the pool's model servers.", name, nil),
		running: prometheus.NewDesc("inference_pool_average_running_requests", "Mean requests running in the pool's model servers.", name, nil),
		ready:   prometheus.NewDesc("inference_pool_ready_pods", "Ready pods (endpoints) of the pool.", name, nil),
		perPod:  prometheus.NewDesc("inference_pool_per_pod_queue_size", "Requests waiting in each model server of the pool.", []string{"name", "model_server_pod"}, nil),
		indexer: prometheus.NewDesc("inference_extension_prefix_indexer_size", "Entries (prompt blocks) held by the prefix index.", nil, nil),
	}
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
	var kv, queue, running float64
	scraped := 0
	for _, w := range ws {
		m := w.Metrics()
		if m == nil {
			continue
		}
		scraped++
		kv += m.KVUsage
		queue += float64(m.Waiting)
		running += float64(m.Running)
		ch <- prometheus.MustNewConstMetric(c.perPod, prometheus.GaugeValue, float64(m.Waiting), c.pool, endpointLabel(w.Endpoint()))
	}
	if scraped > 0 {
		n := float64(scraped)
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
