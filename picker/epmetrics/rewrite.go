package epmetrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// RewriteDecisions counts the requests model rewrite rules matched: the
// upstream inference_extension_model_rewrite_decisions_total series, by
// rewrite, requested model and target model.
type RewriteDecisions struct {
	vec *prometheus.CounterVec

	mu     sync.RWMutex
	counts map[rewriteKey]prometheus.Counter
}

type rewriteKey struct{ rewrite, model, target string }

// NewRewriteDecisions returns the counter registered with reg (nil
// registers nothing).
func NewRewriteDecisions(reg prometheus.Registerer) *RewriteDecisions {
	d := &RewriteDecisions{
		vec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "inference_extension", Name: "model_rewrite_decisions_total",
			Help: "Requests a model rewrite rule matched, by rewrite, requested model and the target model chosen (the requested one included).",
		}, []string{"model_rewrite_name", "model_name", "target_model"}),
		counts: map[rewriteKey]prometheus.Counter{},
	}
	if reg != nil {
		reg.MustRegister(d.vec)
	}
	return d
}

// Record counts one request for model (the model_name of the request's
// series, bounded as they are) that rewrite sent to target. Past maxModels
// series the requested model counts as otherModel as well.
func (d *RewriteDecisions) Record(rewrite, model, target string) {
	k := rewriteKey{rewrite, model, target}
	d.mu.RLock()
	c, ok := d.counts[k]
	d.mu.RUnlock()
	if !ok {
		c = d.counter(k)
	}
	c.Inc()
}

func (d *RewriteDecisions) counter(k rewriteKey) prometheus.Counter {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.counts[k]; ok {
		return c
	}
	if len(d.counts) >= maxModels {
		k.model = otherModel
		if c, ok := d.counts[k]; ok {
			return c
		}
	}
	c := d.vec.WithLabelValues(k.rewrite, k.model, k.target)
	d.counts[k] = c
	return c
}
