package epmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferpick/inferpick/picker/prefix"
)

// PrefixMatches records, per pick, how much of the prompt the prefix index
// found on the best-matching worker: the upstream prefix-indexer series.
type PrefixMatches struct {
	ratio prometheus.Histogram
	bytes prometheus.Histogram
}

// NewPrefixMatches returns the recorder registered with reg (nil registers
// nothing).
func NewPrefixMatches(reg prometheus.Registerer) *PrefixMatches {
	p := &PrefixMatches{
		ratio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "inference_extension", Name: "prefix_indexer_hit_ratio",
			Help:    "Share of the prompt the best-matching worker holds, per pick.",
			Buckets: []float64{0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0},
		}),
		bytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Subsystem: "inference_extension", Name: "prefix_indexer_hit_bytes",
			Help:    "Prompt bytes the best-matching worker holds, per pick.",
			Buckets: []float64{0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536},
		}),
	}
	if reg != nil {
		reg.MustRegister(p.ratio, p.bytes)
	}
	return p
}

// Observe records a match of matched blocks out of total (policy's
// WithMatchObserver).
func (p *PrefixMatches) Observe(matched, total int) {
	p.bytes.Observe(float64(matched * prefix.BlockSize))
	if total > 0 {
		p.ratio.Observe(float64(matched) / float64(total))
	}
}
