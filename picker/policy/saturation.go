package policy

import (
	"time"

	"github.com/inferpick/inferpick/picker/registry"
)

// Saturation is how near the workers ws are, on average, to taking no more
// work as a pick judges it (see Config): 0 when they are idle, 1 when every
// one is saturated, and 1 for no workers at all. c must be defaulted. A
// worker counts the larger of its in-flight requests over MaxInFlight (when
// set) and, from metrics no older than MetricsStaleness, the smaller of its
// waiting requests over QueueThreshold and its KV-cache usage over
// KVCacheThreshold, since it is saturated only once both are reached; a
// worker counts 1 at most.
func (c Config) Saturation(ws []*registry.Worker, now time.Time) float64 {
	if len(ws) == 0 {
		return 1
	}
	var sum float64
	for _, w := range ws {
		var s float64
		if c.MaxInFlight > 0 {
			s = float64(w.InFlight()) / float64(c.MaxInFlight)
		}
		m := w.Metrics()
		if m != nil && m.Fresh(now, c.MetricsStaleness.Duration) &&
			c.QueueThreshold > 0 && c.KVCacheThreshold > 0 {
			s = max(s, min(float64(m.Waiting)/float64(c.QueueThreshold), m.KVUsage/c.KVCacheThreshold))
		}
		sum += min(s, 1)
	}
	return sum / float64(len(ws))
}
