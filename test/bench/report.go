package main

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/inferpick/inferpick/test/bench/routing"
)

// report gathers every part's results and writes BENCHMARKS.md.
type report struct {
	started   time.Time
	elapsed   time.Duration
	machine   machine
	command   string
	gobench   []goBench
	load      []loadResult
	peers     *peersResult
	peersOnly bool // the report is of the peers benchmark alone
	scrape    *scrapeResult
	spec      routing.SimSpec
	workloads []*routing.Workload
	routing   []*routing.Result
	flow      []flowRun
	scale     []scaleResult
	scaling   []scalingPoint
	repro     []*routing.Result
	offload   []*routing.Result
	matrix    []matrixRun
	replicas  *replicaReport
}

type machine struct {
	CPUs     int
	Model    string
	Go       string
	LoadAvg  string
	Kernel   string
	Hostname string
}

func describeMachine() machine {
	m := machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if out, err := exec.Command("nproc").Output(); err == nil {
		var n int
		if _, err := fmt.Sscan(string(out), &n); err == nil {
			m.CPUs = n
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// verdict is one target and whether it was met.
type verdict struct {
	target, observed string
	met              bool
	known            bool
	// detail is this run's figures behind a miss, which the report puts
	// before the target's explanation (missedBecause), so that the
	// explanation needs no figure a later run would change.
	detail string
}

func (v verdict) mark() string {
	switch {
	case !v.known:
		return "not measured"
	case v.met:
		return "met"
	default:
		return "**not met**"
	}
}

func (r *report) bench(name string) (goBench, bool) {
	for _, g := range r.gobench {
		if g.Name == name {
			return g, true
		}
	}
	return goBench{}, false
}

func (r *report) markdown(plotDir string) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# inferpick benchmarks\n\n")
	target := "make bench"
	if r.peersOnly {
		target = "make bench-peers"
	}
	w("Written by `go run ./test/bench` (`%s`); do not edit by hand.\n\n", target)
	w("- Date: %s (took %v)\n", r.started.UTC().Format("2006-01-02 15:04 MST"), r.elapsed.Round(time.Second))
	w("- Machine: %d CPUs (`nproc`), %s, Linux %s, %s\n", r.machine.CPUs, r.machine.Model, r.machine.Kernel, r.machine.Go)
	w("- Load average when the report was written: %s. The machine is shared with other builds, so every\n", describeMachine().LoadAvg)
	w("  number here was taken under load and is noisy; the micro-benchmarks are medians of `-count` runs.\n")
	w("- Command: `%s`\n\n", r.command)
	if r.peersOnly {
		w("%s", peersMarkdown(r.peers))
		return b.String()
	}

	w("## Targets\n\n| target | observed | verdict |\n|---|---|---|\n")
	vs := r.verdicts()
	for _, v := range vs {
		w("| %s | %s | %s |\n", v.target, v.observed, v.mark())
	}
	w("\n")
	missed := false
	explained := map[string]string{} // explanation → the first target it was given for
	for _, v := range vs {
		why, ok := missedBecause(v.target)
		if !v.known || v.met || !ok {
			continue
		}
		if !missed {
			w("### Where a target is missed, and why\n\n")
			missed = true
		}
		if first, ok := explained[why]; ok {
			if v.detail != "" {
				w("- **%s**: %s As for %s.\n", v.target, v.detail, first)
			} else {
				w("- **%s**: as for %s.\n", v.target, first)
			}
			continue
		}
		explained[why] = v.target
		if v.detail != "" {
			r, n := utf8.DecodeRuneInString(why)
			why = v.detail + " " + string(unicode.ToUpper(r)) + why[n:]
		}
		w("- **%s**: %s\n", v.target, why)
	}
	if missed {
		w("\n")
	}

	if len(r.gobench) > 0 {
		w("## Hot-path micro-benchmarks\n\n")
		w("`go test -run '^$' -bench <pattern> -benchmem -count N -benchtime T -tags vtprotobuf <pkg>`, for each row's package; medians over the runs.\n")
		w("`BenchmarkHandle` is the whole pick: the ext_proc handler on an in-memory stream (headers, 16 KB body chunks,\n")
		w("body parse, cache-aware pick on a warm index, guard, reply messages), for a picker deployed alone, as\n")
		w("`inferpick` runs without leader election; 16 tenants' 200 KB system prompts, each followed by one of 64\n")
		w("conversations. `BenchmarkHandleReplica` is the same for one of three active-active replicas, which send a\n")
		w("tenant's first request to its prefix's home: at 100 workers two tenants share one, their conversations exceed\n")
		w("its capacity and each pick there inserts and evicts half a prompt. `BenchmarkHandleKVEvents` is the pick with\n")
		w("`--kv-events-port` on, where the policy first asks its index whether it knows the prompt (`BenchmarkKnows`\n")
		w("alone; `BenchmarkKnowsThenPick` both, with the prompt's hashes kept from one to the other or made twice).\n")
		w("`BenchmarkExchange` adds a real gRPC\n")
		w("stream over an in-process connection. `BenchmarkCatchUp` is off the request path: what a replica spends, as it\n")
		w("subscribes to a pod, reading the KV-event batches the pod keeps (`--kv-events-replay-port`) over loopback into a\n")
		w("fresh index, each batch a 2,048-token prefill step that evicts an older one; `BenchmarkLookup` is a lookup there\n")
		w("of a 2,048-token prompt that 1, 8 or 16 of 16 workers hold, what a request whose prompt the picker's own index\n")
		w("does not know costs beyond its `/tokenize`; `BenchmarkEventIndexMemory` is the heap that index takes per block a\n")
		w("worker holds (16 workers, 0.8 to 1.4 million blocks, each prompt on one worker or on two; the most just after a\n")
		w("part of its tables doubles). ns/byte is ns/op per body byte (per batch byte for `BenchmarkCatchUp`; from\n")
		w("`b.SetBytes`).\n\n")
		w("| package | benchmark | runs | ns/op | ns/byte | B/op | allocs/op | other |\n|---|---|---:|---:|---:|---:|---:|---|\n")
		for _, g := range r.gobench {
			var other []string
			for _, unit := range slices.Sorted(maps.Keys(g.Median)) { // the same order in every row
				switch unit {
				case "ns/op", "B/op", "allocs/op", "MB/s":
				default:
					other = append(other, fmt.Sprintf("%.1f %s", g.Median[unit], unit))
				}
			}
			nsb := "–"
			if v := g.nsPerByte(); v > 0 {
				nsb = fmt.Sprintf("%.2f", v)
			}
			w("| %s | %s | %d | %s | %s | %.0f | %.0f | %s |\n", g.Pkg, g.Name, g.Runs, human(g.Median["ns/op"]), nsb,
				g.Median["B/op"], g.Median["allocs/op"], strings.Join(other, ", "))
		}
		w("\n")
	}

	if len(r.load) > 0 {
		w("## ext_proc load test\n\n")
		w("The `inferpick` binary (policy cache-aware, 8 endpoints serving a simulator's /metrics page, no model server\n")
		w("behind them) driven over loopback gRPC by this process: each stream sends request headers and the body in\n")
		w("16 KB chunks, reads the routing reply and the body, sends response headers and three SSE chunks (the last\n")
		w("with `[DONE]`), reads each reply and ends. Picker CPU is the sum of its threads' `/proc/<pid>/task/*/schedstat` (nanoseconds), less its idle\n")
		w("(scraping) rate measured before; the load generator shares the same 2 cores, so requests/s is bounded by\n")
		w("both, and requests/s per picker core (1 / CPU per request) is the figure to compare with the target. Each\n")
		w("setting runs %s, the settings in turn each round; the table shows each setting's median round.\n\n", plural(r.load[0].Rounds, "round"))
		w("| prompt | streams | requests | req/s (wall) | picker CPU per request | req/s per picker core | load generator CPU |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, l := range r.load {
			w("| %d KB | %d | %d | %.0f | %s | %.0f | %.1f s |\n", l.PromptBytes>>10, l.Streams, l.Requests, l.rps(),
				human(l.cpuPerRequest()*1e9), 1/l.cpuPerRequest(), l.ClientCPU)
		}
		w("\n`make bench-peers` runs this load test through the upstream endpoint picker as well, both serving one\n")
		w("InferencePool of a real API server, and writes [docs/bench/peers.md](docs/bench/peers.md).\n\n")
	}
	w("%s", peersMarkdown(r.peers))
	if r.scrape != nil {
		s := r.scrape
		w("## Scrape cost\n\n")
		w("The `inferpick` binary scraping %d endpoints at the default `--refresh-metrics-interval` (%v), each serving\n", s.Endpoints, s.Interval)
		w("the simulator's /metrics page (%d bytes), no requests: %.3f cores over %.0f s (`/proc/<pid>/task/*/schedstat`).\n\n", s.PageBytes, s.Cores, s.Seconds)
	}
	w("%s", scalingMarkdown(r.scaling, plotDir))
	w("%s", scaleMarkdown(r.scale))
	if len(r.routing) > 0 {
		r.routingSection(w, plotDir)
	}
	w("%s", replicasMarkdown(r.replicas))
	w("%s", flowMarkdown(r.flow))
	w("%s", reproMarkdown(r.repro))
	w("%s", offloadMarkdown(r.offload))
	w("%s", matrixMarkdown(r.matrix, filepath.ToSlash(plotDir)))
	return b.String()
}

func (r *report) routingSection(w func(string, ...any), plotDir string) {
	s := r.spec
	w("## Routing benchmark\n\n")
	w("%d `vllm-sim` processes on 127.0.0.%d-%d:%d (time scale %g, %d KV blocks of %d tokens each, max %d sequences,\n",
		s.Pods, s.FirstIP, s.FirstIP+s.Pods-1, s.Port, s.TimeScale, s.NumGPUBlocks, s.BlockSize, s.MaxNumSeqs)
	w("prefill %g µs/token, decode %g ms/step, %d output tokens per request) behind the `test/gateway` stand-in\n", s.PrefillUsTok, s.DecodeMsTok, s.MaxTokens)
	w("(in process, message timeout off as in Envoy's full-duplex mode) and the `inferpick` binary (`--static-endpoints`,\n")
	w("`--config-file` with the policy, scrape every %v). Every policy × workload run starts a fresh cluster, so the\n", s.ScrapeEvery)
	w("simulators' caches and the picker's index start cold. Times are **simulated seconds**.\n\n")
	w("Workloads:\n\n")
	w("- `shared-prefix@R`: 16 system prompts of 8,000 bytes (2,000 tokens; the 16 need 2,000 blocks, one pod holds %d),\n", s.NumGPUBlocks)
	w("  each request one of them (uniform) plus a 200-byte question; Poisson arrivals at R requests per simulated second.\n")
	w("- `multi-turn`: 24 sessions × 6 turns; a 4,000-byte system prompt per session, each turn adds a 300-byte user\n")
	w("  message and resends the history with a 200-byte assistant reply; think times of 0.5 to 1.5 s; sessions run in parallel.\n")
	w("- `burst`: one request warms one pod with an 8,000-byte prefix, then 64 requests on that prefix at once.\n")
	w("- `no-sharing@12`: 2,000-byte prompts with nothing in common (do-no-harm check).\n")
	w("- `multi-lora@%g`: requests for %d LoRA adapters registered on every pod (at most %d loaded and in a batch per pod,\n", multiLoRARate, len(s.LoRAAdapters), s.MaxLoRAs)
	w("  %g ms of simulated time per load, during which the pod's whole batch waits), Zipf popularity (s = 1.1), each\n", s.LoRALoadMs)
	w("  with its adapter's 2,000-byte system prompt and a 200-byte question; Poisson arrivals over %g simulated seconds.\n\n", multiLoRAWindow)
	w("Measures: **hit** = cached / prompt tokens summed over the simulators' `/sim/stats`; **oracle** = the hit rate of a\n")
	w("perfect router with unbounded caches (every full block an earlier prompt began with is cached; computed from the\n")
	w("workload); **TTFT p50/p90/p99** = client-measured time to the first content token through the gateway: the time until\n")
	w("the pod's response headers (the gateway, the pick, the pod queueing the request; this host's work) as it was, plus the\n")
	w("engine's time from there to the first token divided by the time scale (dividing the host's part too would multiply\n")
	w("by 1/scale what the loaded machine costs a request); **sim TTFT** = the\n")
	w("simulators' own mean simulated TTFT (engine time, no transport noise); **thr** = completed requests per simulated\n")
	w("second from the first send to the last answer; **skew** = max/mean over pods of the picker's in-flight count\n")
	w("(`/debug/workers`, sampled every 10 ms wall), time-averaged and at the busiest sample; **ok** = successful / sent\n")
	w("(a run is cut 40 simulated seconds after its last arrival).\n\n")
	w("| workload | policy | ok | hit | oracle | TTFT p50 | p90 | p99 | sim TTFT | thr | skew avg | skew peak |\n")
	w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, wl := range r.workloads {
		for _, pol := range r.policyLabels() {
			res := r.find(pol, wl.Name)
			if res == nil || res.Workload != wl.Name {
				continue
			}
			w("| %s | %s | %d/%d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %.2f | %.2f |\n",
				res.Workload, res.Policy, res.OK, res.Sent, res.HitRate, res.Oracle, res.Quantile(0.5), res.Quantile(0.9),
				res.Quantile(0.99), res.SimMeanTTFT, res.Throughput, res.SkewAvg, res.SkewPeak)
		}
	}
	w("\n")
	r.loraTable(w)
	rel := func(name string) string { return filepath.ToSlash(filepath.Join(plotDir, name)) }
	w("![TTFT p90 vs arrival rate](%s)\n\n![hit rate per policy](%s)\n\n![burst load over time](%s)\n\n",
		rel(plotTTFT), rel(plotHit), rel(plotBurst))
}

// human formats nanoseconds.
func human(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	default:
		return fmt.Sprintf("%.0f ns", ns)
	}
}

// loraTable reports the multi-lora runs: adapter loads (summed over the
// simulators' /sim/stats), the share of adapter requests that found their
// adapter loaded, and TTFT.
func (r *report) loraTable(w func(string, ...any)) {
	var rows []*routing.Result
	for _, pol := range r.policyLabels() {
		for _, res := range r.routing {
			if res.Policy == pol && strings.HasPrefix(res.Workload, "multi-lora") {
				rows = append(rows, res)
			}
		}
	}
	if len(rows) == 0 {
		return
	}
	w("LoRA adapters (`multi-lora`): **loads** = adapters the simulators loaded (the %d registered last are loaded at\n", r.spec.MaxLoRAs)
	w("start and not counted); **adapter hit** = 1 − loads / requests, the share of requests that found their adapter\n")
	w("loaded; **prefix hit** = cached / prompt tokens.\n\n")
	w("| policy | ok | loads | adapter hit | prefix hit | TTFT p50 | p90 | p99 |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, res := range rows {
		w("| %s | %d/%d | %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n", res.Policy, res.OK, res.Sent, res.LoRALoads,
			adapterHit(res), res.HitRate, res.Quantile(0.5), res.Quantile(0.9), res.Quantile(0.99))
	}
	w("\n")
}

// adapterHit is the share of adapter requests that loaded no adapter.
func adapterHit(res *routing.Result) float64 {
	if res.LoRARequests == 0 {
		return 0
	}
	return max(0, 1-float64(res.LoRALoads)/float64(res.LoRARequests))
}
