package observe

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferpick/inferpick/picker/prefix"
)

// IndexStatser is a policy that keeps a prefix index.
type IndexStatser interface {
	IndexStats() (prefix.Stats, bool)
}

// IndexCollector exports the size and hit ratio of a policy's prefix index.
type IndexCollector struct {
	src     IndexStatser
	blocks  *prometheus.Desc
	entries *prometheus.Desc
	cap     *prometheus.Desc
	lookups *prometheus.Desc
	hits    *prometheus.Desc
}

var _ prometheus.Collector = (*IndexCollector)(nil)

// NewIndexCollector returns a collector over src's index.
func NewIndexCollector(src IndexStatser) *IndexCollector {
	return &IndexCollector{
		src: src,
		blocks: prometheus.NewDesc("inferpick_prefix_index_blocks",
			"Distinct prompt blocks the prefix index holds.", nil, nil),
		entries: prometheus.NewDesc("inferpick_prefix_index_entries",
			"(block, worker) pairs the prefix index holds.", nil, nil),
		cap: prometheus.NewDesc("inferpick_prefix_index_capacity_blocks",
			"Hard cap on the (block, worker) pairs the prefix index holds, whatever the model servers report.", nil, nil),
		lookups: prometheus.NewDesc("inferpick_prefix_index_lookup_blocks_total",
			"Prompt blocks looked up in the prefix index.", nil, nil),
		hits: prometheus.NewDesc("inferpick_prefix_index_hit_blocks_total",
			"Looked-up prompt blocks some worker held as part of a matched prefix; divided by lookups, the index hit ratio.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *IndexCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.blocks
	ch <- c.entries
	ch <- c.cap
	ch <- c.lookups
	ch <- c.hits
}

// Collect implements prometheus.Collector.
func (c *IndexCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c.src.IndexStats()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.blocks, prometheus.GaugeValue, float64(s.Blocks))
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(c.cap, prometheus.GaugeValue, float64(s.Capacity))
	ch <- prometheus.MustNewConstMetric(c.lookups, prometheus.CounterValue, float64(s.Lookups))
	ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(s.Hits))
}
