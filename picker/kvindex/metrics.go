package kvindex

import "github.com/prometheus/client_golang/prometheus"

// Collector exports what the index learned from the servers' events and
// how its lookups went.
type Collector struct {
	ix  *Index
	sub *Subscriber
	loc *Locator

	subs, blocks, offloaded, dropped, lookups, failed, skipped, gaps, replays, strays *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the collector of ix, the subscriber feeding it and
// the locator reading it.
func NewCollector(ix *Index, sub *Subscriber, loc *Locator) *Collector {
	return &Collector{
		ix: ix, sub: sub, loc: loc,
		subs: prometheus.NewDesc("inferpick_kv_events_subscriptions",
			"Model-server engines whose KV-cache events the picker is subscribed to now (one per server, or one per data-parallel engine behind a server's port), and publishers connected to --kv-events-listen.", nil, nil),
		blocks: prometheus.NewDesc("inferpick_kv_events_blocks",
			"KV blocks the model servers' events say their caches hold, over all servers.", nil, nil),
		offloaded: prometheus.NewDesc("inferpick_kv_events_offloaded_blocks",
			"Of inferpick_kv_events_blocks, those only the servers' KV offloading tiers hold (copied there, then evicted from the GPU).", nil, nil),
		dropped: prometheus.NewDesc("inferpick_kv_events_dropped_blocks_total",
			"Blocks of events the picker could not apply, by reason: unchained (stored, parent never seen stored), malformed, full (over a server's bound), offloaded (copies the server's KV offloading made of blocks the picker did not know on its GPU, which the tier's events do not key), group (stored in or removed from a hybrid model's KV-cache group other than the full-attention one).", []string{"reason"}, nil),
		lookups: prometheus.NewDesc("inferpick_kv_events_lookups_total",
			"Prompts the picker's own index did not know, looked up by tokenizing them on a model server (/tokenize).", nil, nil),
		failed: prometheus.NewDesc("inferpick_kv_events_lookup_failures_total",
			"Lookups whose /tokenize call failed; those prompts were routed on the picker's own index.", nil, nil),
		skipped: prometheus.NewDesc("inferpick_kv_events_lookups_skipped_total",
			"Prompts not looked up because every model server's /tokenize calls kept failing (each is left out for 1 s after 3 failures in a row, doubling up to 30 s); they were routed on the picker's own index.", nil, nil),
		gaps: prometheus.NewDesc("inferpick_kv_events_gaps_total",
			"Gaps in an engine's or a connected publisher's event sequence numbers: batches the picker missed (read again from the server with --kv-events-replay-port, else the engine's blocks are forgotten).", nil, nil),
		strays: prometheus.NewDesc("inferpick_kv_events_unmatched_batches_total",
			"Event batches from publishers connected to --kv-events-listen that were dropped because their topic (kv@<pod IP>@<model>, at most 512 bytes) and data-parallel rank name no worker of the pool.", nil, nil),
		replays: prometheus.NewDesc("inferpick_kv_events_replays_total",
			"Replays of an engine's kept event batches (on each subscription and after a gap, with --kv-events-replay-port), by result: whole, truncated (the server no longer kept the first batch asked for; the engine's blocks were forgotten), failed (likewise).", []string{"result"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.subs, c.blocks, c.offloaded, c.dropped, c.lookups, c.failed, c.skipped, c.gaps, c.replays, c.strays} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	blocks, d := c.ix.Stats()
	offloaded := c.ix.Offloaded()
	calls, failed, skipped := c.loc.Calls()
	ch <- prometheus.MustNewConstMetric(c.subs, prometheus.GaugeValue, float64(c.sub.Connected()))
	ch <- prometheus.MustNewConstMetric(c.blocks, prometheus.GaugeValue, float64(blocks))
	ch <- prometheus.MustNewConstMetric(c.offloaded, prometheus.GaugeValue, float64(offloaded))
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(d.Unchained), "unchained")
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(d.Malformed), "malformed")
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(d.Full), "full")
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(d.Offloaded), "offloaded")
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(d.OtherGroup), "group")
	ch <- prometheus.MustNewConstMetric(c.lookups, prometheus.CounterValue, float64(calls))
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(failed))
	ch <- prometheus.MustNewConstMetric(c.skipped, prometheus.CounterValue, float64(skipped))
	ch <- prometheus.MustNewConstMetric(c.gaps, prometheus.CounterValue, float64(c.sub.gaps.Load()))
	ch <- prometheus.MustNewConstMetric(c.strays, prometheus.CounterValue, float64(c.sub.strayBatches.Load()))
	for i, name := range replayResultNames {
		ch <- prometheus.MustNewConstMetric(c.replays, prometheus.CounterValue, float64(c.sub.replays[i].Load()), name)
	}
}
