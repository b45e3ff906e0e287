package main

import (
	"fmt"
	"strings"

	"github.com/inferpick/inferpick/test/bench/routing"
)

// verdicts checks the results against the project's performance and
// routing-quality targets. They are reported, never asserted.
func (r *report) verdicts() []verdict {
	var out []verdict
	pick := func(target, name string, limit float64) {
		v := verdict{target: target}
		if g, ok := r.bench(name); ok {
			ns := g.Median["ns/op"]
			v.known, v.met = true, ns <= limit
			v.observed = fmt.Sprintf("%s (%#q)", human(ns), name)
		}
		out = append(out, v)
	}
	pick("whole pick, 32 KB chat body, 100 workers ≤ 50 µs", "BenchmarkHandle/body=32KB/workers=100", 50e3)
	pick("whole pick, 400 KB chat body, 100 workers ≤ 500 µs", "BenchmarkHandle/body=400KB/workers=100", 500e3)

	v := verdict{target: "≥ 5,000 ext_proc requests/s per core, short (1 KB) prompts"}
	for _, l := range r.load {
		if l.PromptBytes == 1<<10 && l.Requests > 0 {
			per := 1 / l.cpuPerRequest()
			v.known, v.met = true, per >= 5000
			v.observed = fmt.Sprintf("%.0f req/s per picker core (%s CPU per request)", per, human(l.cpuPerRequest()*1e9))
		}
	}
	out = append(out, v)

	v = verdict{target: "prefix index ≤ 32 bytes per indexed block"}
	// The worst of the index sizes the benchmark tries.
	for _, g := range r.gobench {
		if bpb, ok := g.Median["B/block"]; ok && strings.HasPrefix(g.Name, "BenchmarkIndexMemory") {
			if !v.known || v.met && bpb > 32 {
				v.known, v.met = true, bpb <= 32
				v.observed = fmt.Sprintf("%.1f B/block (%#q)", bpb, g.Name)
			}
		}
	}
	out = append(out, v)

	v = verdict{target: "scraping 100 endpoints ≤ 0.2 core"}
	if r.scrape != nil {
		v.known, v.met, v.observed = true, r.scrape.Cores <= 0.2, fmt.Sprintf("%.3f cores", r.scrape.Cores)
	}
	out = append(out, v)

	if len(r.flow) > 0 {
		out = append(out, flowVerdict(r.flow))
	}
	out = append(out, replicaVerdicts(r.replicas)...)
	if len(r.routing) == 0 {
		return out
	}
	const ca = "cache-aware"
	// Hit rate ≥ 0.9 × oracle on every shared-prefix rate.
	v = verdict{target: "cache-aware hit rate ≥ 0.9 × oracle on shared-prefix"}
	var obs []string
	v.met = true
	for _, res := range r.sharedRuns(ca) {
		v.known = true
		ratio := res.HitRate / res.Oracle
		v.met = v.met && ratio >= 0.9
		obs = append(obs, fmt.Sprintf("@%g: %.3f / %.3f = %.2f", res.Rate, res.HitRate, res.Oracle, ratio))
	}
	v.observed = strings.Join(obs, "; ")
	out = append(out, v)

	// TTFT p90 at the highest rate round-robin completes.
	var top *routing.Result
	for _, res := range r.sharedRuns("round-robin") {
		if res.Completed && (top == nil || res.Rate > top.Rate) {
			top = res
		}
	}
	for _, cmp := range []struct {
		pol    string
		factor float64
	}{{"round-robin", 0.5}, {"weighted-scorer", 0.8}} {
		v = verdict{target: fmt.Sprintf("cache-aware TTFT p90 ≤ %.1f × %s at the highest rate round-robin completes", cmp.factor, cmp.pol)}
		if top != nil {
			a, b := r.find(ca, top.Workload), r.find(cmp.pol, top.Workload)
			if a != nil && b != nil {
				v.known = true
				v.met = a.Quantile(0.9) <= cmp.factor*b.Quantile(0.9)
				v.observed = fmt.Sprintf("%s: %.3f s vs %.3f s (ratio %.2f)", top.Workload, a.Quantile(0.9), b.Quantile(0.9), a.Quantile(0.9)/b.Quantile(0.9))
			}
		} else {
			v.observed = "round-robin completed no shared-prefix rate"
		}
		out = append(out, v)
	}

	v = verdict{target: "cache-aware burst load skew ≤ 2 (peak; time-averaged in parentheses)"}
	if res := r.find(ca, "burst"); res != nil {
		v.known, v.met = true, res.SkewPeak <= 2
		v.observed = fmt.Sprintf("%.2f (%.2f)", res.SkewPeak, res.SkewAvg)
	}
	out = append(out, v)

	v = verdict{target: "cache-aware no-sharing TTFT p90 within 5% of least-load"}
	a, b := r.find(ca, "no-sharing"), r.find("least-load", "no-sharing")
	if a != nil && b != nil {
		ratio := a.Quantile(0.9) / b.Quantile(0.9)
		v.known, v.met = true, ratio <= 1.05
		v.observed = fmt.Sprintf("%.3f s vs %.3f s (ratio %.2f)", a.Quantile(0.9), b.Quantile(0.9), ratio)
	}
	out = append(out, v)
	return out
}
