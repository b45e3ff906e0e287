package main

import (
	"fmt"
	"strings"

	"github.com/inferpick/inferpick/test/bench/routing"
)

// worst judges the highest median of unit over the benchmarks named
// prefix... against limit, reporting it with format and the benchmark's name.
func (r *report) worst(target, prefix, unit string, limit float64, format string) verdict {
	v := verdict{target: target}
	highest := 0.0
	for _, g := range r.gobench {
		if x, ok := g.Median[unit]; ok && strings.HasPrefix(g.Name, prefix) && (!v.known || x > highest) {
			highest, v.known, v.met = x, true, x <= limit
			v.observed = fmt.Sprintf(format+" (%#q)", x, g.Name)
		}
	}
	return v
}

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
	pick("whole pick, 400 KB chat body, 100 workers ≤ 250 µs (#17)", "BenchmarkHandle/body=400KB/workers=100", 250e3)
	out = append(out, r.pickGrowth(1.5))

	// Picker CPU per full exchange in the load test (#17).
	for _, t := range []struct {
		size  int
		limit float64 // seconds
	}{{1 << 10, 0.10e-3}, {32 << 10, 0.30e-3}, {400 << 10, 2.4e-3}} {
		v := verdict{target: fmt.Sprintf("full ext_proc exchange ≤ %s picker CPU, %d KB body (#17)", human(t.limit*1e9), t.size>>10)}
		// Every stream count must meet it.
		var seen []string
		over := false
		for _, l := range r.load {
			if l.PromptBytes == t.size && l.Requests > 0 {
				over = over || l.cpuPerRequest() > t.limit
				seen = append(seen, fmt.Sprintf("%s at %d streams", human(l.cpuPerRequest()*1e9), l.Streams))
			}
		}
		if len(seen) > 0 {
			v.known, v.met = true, !over
			v.observed = strings.Join(seen, ", ") + " (CPU per request, median of the rounds)"
		}
		out = append(out, v)
	}

	out = append(out,
		r.worst("≤ 60 allocations per 1 KB ext_proc exchange (#17)", "BenchmarkExchange/body=1KB/", "allocs/op", 60, "%.0f allocs/op"),
		r.worst("prefix index ≤ 24 bytes per indexed block at every size measured (#17)", "BenchmarkIndexMemory", "B/block", 24, "%.1f B/block"))

	v := verdict{target: "scraping 100 endpoints at the default interval ≤ 0.1 core (#17)"}
	if r.scrape != nil {
		v.known, v.met, v.observed = true, r.scrape.Cores <= 0.1, fmt.Sprintf("%.3f cores", r.scrape.Cores)
	}
	out = append(out, v)

	out = append(out, scaleVerdicts(r.scale)...)
	if len(r.flow) > 0 {
		out = append(out, flowVerdict(r.flow))
	}
	out = append(out, matrixVerdicts(r.matrix)...)
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

	out = append(out, r.loraVerdicts()...)

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

// pickGrowth checks that the whole pick at 1,000 workers costs at most
// factor times the pick at 100, at every body size (#17).
func (r *report) pickGrowth(factor float64) verdict {
	v := verdict{target: fmt.Sprintf("whole pick at 1,000 workers ≤ %.1f × the pick at 100, every body size (#17)", factor)}
	worst := 0.0
	for _, size := range []string{"1KB", "32KB", "400KB"} {
		a, okA := r.bench("BenchmarkHandle/body=" + size + "/workers=1000")
		b, okB := r.bench("BenchmarkHandle/body=" + size + "/workers=100")
		if !okA || !okB || b.Median["ns/op"] == 0 {
			continue
		}
		if ratio := a.Median["ns/op"] / b.Median["ns/op"]; !v.known || ratio > worst {
			worst = ratio
			v.known, v.met = true, ratio <= factor
			v.observed = fmt.Sprintf("%.2f× at %s (%s vs %s)", ratio, size, human(a.Median["ns/op"]), human(b.Median["ns/op"]))
		}
	}
	return v
}

// loraVerdicts compares cache-aware with least-load on multi-lora: adapter
// loads ≤ 0.3× and TTFT p90 ≤ 0.7×.
func (r *report) loraVerdicts() []verdict {
	var ca, ll *routing.Result
	for _, res := range r.routing {
		if !strings.HasPrefix(res.Workload, "multi-lora") {
			continue
		}
		switch res.Policy {
		case "cache-aware":
			ca = res
		case "least-load":
			ll = res
		}
	}
	loads := verdict{target: "cache-aware multi-lora adapter loads ≤ 0.3 × least-load"}
	ttft := verdict{target: "cache-aware multi-lora TTFT p90 ≤ 0.7 × least-load"}
	if ca == nil || ll == nil {
		return []verdict{loads, ttft}
	}
	if ll.LoRALoads > 0 {
		ratio := float64(ca.LoRALoads) / float64(ll.LoRALoads)
		loads.known, loads.met = true, ratio <= 0.3
		loads.observed = fmt.Sprintf("%d vs %d loads (ratio %.2f)", ca.LoRALoads, ll.LoRALoads, ratio)
	}
	if p := ll.Quantile(0.9); p > 0 {
		ratio := ca.Quantile(0.9) / p
		ttft.known, ttft.met = true, ratio <= 0.7
		ttft.observed = fmt.Sprintf("%.3f s vs %.3f s (ratio %.2f)", ca.Quantile(0.9), p, ratio)
	}
	return []verdict{loads, ttft}
}
