package scrape

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the per-worker scrape metrics. It reads them from the
// live pollers at collection time, so a worker's series exist exactly while
// the worker is polled and vanish, all together, when it is removed.
type collector struct {
	s         *Scraper
	errors    *prometheus.Desc
	malformed *prometheus.Desc
	staleness *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(s *Scraper) *collector {
	return &collector{
		s: s,
		errors: prometheus.NewDesc("inferpick_scrape_errors_total",
			"Failed scrapes of a worker's metrics page, by reason (timeout, connect, status, body_too_large, parse).",
			[]string{"address", "reason"}, nil),
		malformed: prometheus.NewDesc("inferpick_scrape_malformed_lines_total",
			"Lines of a worker's metrics page that could not be read and were skipped.",
			[]string{"address"}, nil),
		staleness: prometheus.NewDesc("inferpick_scrape_staleness_seconds",
			"Seconds since the last good scrape of a worker (since it was added, before the first).",
			[]string{"address"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.errors
	ch <- c.malformed
	ch <- c.staleness
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	now := c.s.opts.clock.Now()
	for _, p := range c.s.livePollers() {
		addr := p.w.Address()
		for r := range numReasons {
			ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue,
				float64(p.errors[r].Load()), addr, r.String())
		}
		ch <- prometheus.MustNewConstMetric(c.malformed, prometheus.CounterValue,
			float64(p.malformed.Load()), addr)
		last := p.created
		if st := p.status.Load(); st != nil && !st.Scraped.IsZero() {
			last = st.Scraped
		}
		ch <- prometheus.MustNewConstMetric(c.staleness, prometheus.GaugeValue,
			max(0, now.Sub(last).Seconds()), addr)
	}
}
