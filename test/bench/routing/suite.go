package routing

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/inferpick/inferpick/picker/policy"
)

// Policy is a named policy configuration under test, or with Upstream the
// upstream endpoint picker in its default configuration.
type Policy struct {
	Label    string
	Config   policy.Config
	Upstream bool
}

// Policies are the policies compared, anchors first.
func Policies() []Policy {
	return []Policy{
		{Label: "round-robin", Config: policy.Config{Name: policy.RoundRobin}},
		{Label: "random", Config: policy.Config{Name: policy.Random}},
		{Label: "least-load", Config: policy.Config{Name: policy.LeastLoad}},
		{Label: "power-of-two", Config: policy.Config{Name: policy.PowerOfTwo}},
		{Label: "weighted-scorer", Config: policy.Config{Name: policy.WeightedScorer}},
		{Label: "cache-aware", Config: policy.Config{Name: policy.CacheAware}},
		{Label: "cache-aware/threshold", Config: policy.Config{Name: policy.CacheAware, CacheAware: policy.CacheAwareConfig{Mode: policy.ModeThreshold}}},
	}
}

// Suite runs every workload under every policy, each run on a freshly
// started cluster so that caches and the picker's index start cold.
func Suite(ctx context.Context, bins Binaries, spec SimSpec, policies []Policy, workloads []*Workload, deadline func(*Workload) time.Duration) ([]*Result, error) {
	workdir, err := os.MkdirTemp("", "inferpick-routing-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(workdir)
	var out []*Result
	for i := range policies {
		p := &policies[i]
		for _, w := range workloads {
			start := time.Now()
			var c *Cluster
			if p.Upstream {
				c, err = StartUpstream(ctx, bins, spec, workdir)
			} else {
				c, err = Start(ctx, bins, spec, p.Config, workdir)
			}
			if err != nil {
				return nil, fmt.Errorf("%s / %s: %w", p.Label, w.Name, err)
			}
			res, err := Run(ctx, c, w, deadline(w))
			c.Stop()
			if err != nil {
				return nil, fmt.Errorf("%s / %s: %w", p.Label, w.Name, err)
			}
			res.Policy = p.Label
			log.Printf("routing %-22s %-20s ok %d/%d hit %.2f (oracle %.2f) ttft p50 %.3fs p90 %.3fs p99 %.3fs sim-mean %.3fs skew %.2f/%.2f lora loads %d  [%.1fs]",
				p.Label, w.Name, res.OK, res.Sent, res.HitRate, res.Oracle, res.Quantile(0.5), res.Quantile(0.9), res.Quantile(0.99),
				res.SimMeanTTFT, res.SkewAvg, res.SkewPeak, res.LoRALoads, time.Since(start).Seconds())
			out = append(out, res)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
		}
	}
	return out, nil
}
