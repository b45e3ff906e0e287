package main

import (
	"fmt"
	"strings"
)

// scaleVerdicts checks the controller-at-scale results: the worst phase's
// CPU per pod event, and per-event work that does not grow with the pool.
func scaleVerdicts(rs []scaleResult) []verdict {
	if len(rs) == 0 {
		return nil
	}
	v := verdict{target: "controller at scale: picker CPU per pod event ≤ 1 ms (every phase, every pool size)", known: true, met: true}
	var obs []string
	for i := range rs {
		r := &rs[i]
		worst := 0.0
		for _, ph := range r.phases() {
			worst = max(worst, ph.cpuPerEvent())
		}
		v.met = v.met && worst <= 1e-3
		obs = append(obs, fmt.Sprintf("%d pods: %s", r.Pods, human(worst*1e9)))
	}
	v.observed = "worst phase " + strings.Join(obs, "; ")
	out := []verdict{v}

	v = verdict{target: "controller at scale: CPU per pod event at 5,000 pods ≤ 1.5 × at 1,000 (work follows what changed)"}
	var small, big *scaleResult
	for i := range rs {
		switch rs[i].Pods {
		case 1000:
			small = &rs[i]
		case 5000:
			big = &rs[i]
		}
	}
	if small != nil && big != nil {
		a, b := small.Steady.cpuPerEvent(), big.Steady.cpuPerEvent()
		v.known, v.met = true, b <= 1.5*a
		v.observed = fmt.Sprintf("steady churn: %s vs %s (%.2f×)", human(b*1e9), human(a*1e9), b/a)
	}
	return append(out, v)
}

func (r *scaleResult) phases() []scalePhase { return []scalePhase{r.Create, r.Restart, r.Steady} }

// scaleMarkdown is the controller-at-scale section of the report.
func scaleMarkdown(rs []scaleResult) string {
	if len(rs) == 0 {
		return ""
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Controller at scale\n\n")
	w("A real kube-apiserver and etcd (envtest) and the `inferpick` binary serving one InferencePool (`--kubeconfig`,\n")
	w("policy cache-aware, `--refresh-metrics-interval 1h` and `--refresh-models-interval 0` so that only the\n")
	w("controllers work: nothing serves the pods' metrics or models). This process writes the pods as a kubelet-less cluster would: each pod is created, then given a Ready\n")
	w("status and a 127.x address through the status subresource. Phases: **create** fills the empty pool; **restart**\n")
	w("replaces every pod in waves of 5%% (the replacements start and become ready, then the old pods are deleted);\n")
	w("**steady** flips a random pod's readiness %d times a second. Each pod write is one watch event for the picker;\n", scaleChurnRate)
	w("a phase ends when a sentinel pod written last is routable and the picker's CPU has settled. CPU is the picker\n")
	w("process's (its threads' `/proc/<pid>/task/*/schedstat`, in nanoseconds), less its idle rate over the pool as it stood just before the phase; memory is its live heap after a collection (`/debug/pprof/heap?gc=1`) and its\n")
	w("resident set, from the empty pool to the full one, per pod (the informer's cached pod included). Pick latency\n")
	w("is the time from the end of a 1 KB request body to the routing reply, one request every 10 ms, on a quiet pool\n")
	w("and during steady churn.\n\n")
	w("| pods | phase | events | wall | picker CPU | CPU per event |\n|---:|---|---:|---:|---:|---:|\n")
	for j := range rs {
		r := &rs[j]
		for i, ph := range r.phases() {
			w("| %d | %s | %d | %.1f s | %.2f s | %s |\n", r.Pods, []string{"create", "restart", "steady"}[i],
				ph.Events, ph.Seconds, ph.CPU, human(ph.cpuPerEvent()*1e9))
		}
	}
	w("\n| pods | heap per pod | RSS per pod | pick p50 quiet | p99 quiet | p50 churn | p99 churn |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for i := range rs {
		r := &rs[i]
		w("| %d | %.1f KB | %.1f KB | %s | %s | %s | %s |\n", r.Pods, r.HeapPerPod/1024, r.RSSPerPod/1024,
			human(r.PickQuiet.quantile(0.5)*1e9), human(r.PickQuiet.quantile(0.99)*1e9),
			human(r.PickChurn.quantile(0.5)*1e9), human(r.PickChurn.quantile(0.99)*1e9))
	}
	w("\n")
	return b.String()
}
