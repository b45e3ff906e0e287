package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/inferpick/inferpick/picker/kvindex"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/test/bench/routing"
)

// offloadEventsPort is where the offload runs' pods publish their KV-cache
// events, each on its own address.
const offloadEventsPort = 5557

// offloadBlocks is the offloading tier of each pod in the offload runs:
// six of the workload's prompts (2,050 tokens, 129 blocks of 16 each). A
// tier keeps a copy of what the GPU pool holds too, so a pod holds six.
const offloadBlocks = 780

// offloadRun is one row of the offloading-tier section: a policy, whether
// the pods have a tier, and whether the picker follows their KV-cache
// events, counting a block held only in a tier at the given weight.
type offloadRun struct {
	label  string
	policy string
	tier   bool
	events bool
	weight string // --kv-events-offload-weight; "" leaves the default
}

var offloadRuns = []offloadRun{
	{label: "round-robin", policy: policy.RoundRobin, tier: true},
	{label: "least-load", policy: policy.LeastLoad, tier: true},
	{label: "cache-aware", policy: policy.CacheAware, tier: true},
	{label: "cache-aware + KV events", policy: policy.CacheAware, tier: true, events: true},
	{label: "cache-aware + KV events (tier weight 0)", policy: policy.CacheAware, tier: true, events: true, weight: "0"},
	{label: "cache-aware (no tier)", policy: policy.CacheAware},
	{label: "cache-aware + KV events (no tier)", policy: policy.CacheAware, events: true},
}

// offloadSpec is the tight-cache setting's pods (two prompts in a GPU
// pool, prefill 1 ms a token, 2 sequences) on addresses of their own.
func offloadSpec() routing.SimSpec {
	s := reproSpec()
	s.FirstIP, s.Port = 91, 18400
	return s
}

// offloadWorkload is the tight-cache workload over twice the prompts: 32,
// more than the GPU pools hold together (16) and fewer than they hold with
// their tiers (48).
func offloadWorkload() *routing.Workload { return tightWorkload("offload@4", 32, 19) }

// offloadBench runs each of offloadRuns whose label only selects (all
// when empty) on a cold cluster.
func offloadBench(ctx context.Context, bins routing.Binaries, only string) ([]*routing.Result, error) {
	var out []*routing.Result
	for _, r := range offloadRuns {
		if !selected(only, r.label) {
			continue
		}
		spec := offloadSpec()
		if r.tier {
			spec.OffloadBlocks = offloadBlocks
		}
		if r.events {
			spec.KVEventsPort = offloadEventsPort
		}
		if r.weight != "" {
			spec.PickerArgs = []string{"--kv-events-offload-weight", r.weight}
		}
		res, err := routing.Suite(ctx, bins, spec, []routing.Policy{{Label: r.label, Config: policy.Config{Name: r.policy}}},
			[]*routing.Workload{offloadWorkload()}, deadline)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.label, err)
		}
		out = append(out, res...)
	}
	return out, nil
}

// offloadMarkdown writes the offloading-tier section.
func offloadMarkdown(res []*routing.Result) string {
	if len(res) == 0 {
		return ""
	}
	s := offloadSpec()
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("## Offloading tier\n\n")
	w("The tight-cache pods (%d KV blocks × %d tokens, about two prompts, prefill %g ms per uncached token, %d\n",
		s.NumGPUBlocks, s.BlockSize, s.PrefillUsTok/1000, s.MaxNumSeqs)
	w("sequences, time scale %g), each with an offloading tier of %d blocks behind its GPU pool (`vllm-sim\n", s.TimeScale, offloadBlocks)
	w("--kv-offloading-blocks`: about six prompts, copies of those in the GPU pool among them; loading a token back\n")
	w("costs 5 µs) unless the row says no tier; 300 streaming requests at 4 per simulated second over 32 shared\n")
	w("8,000-byte system prompts, each with its own question: more prompts than the GPU pools hold together (16),\n")
	w("fewer than they hold with the tiers (48). With KV events the picker subscribes to the pods' events\n")
	w("(`--kv-events-port`), which name the tier's blocks (medium `CPU`), and counts a block only the tier holds at\n")
	w("`--kv-events-offload-weight` (%g unless the row says 0). **GPU hit** = tokens found in the GPU pools,\n", kvindex.DefaultOffloadWeight)
	w("**loaded** = tokens loaded back from a tier, both over the prompt tokens; the rest were **computed** (a perfect\n")
	w("router computes 1 − oracle: each prompt's first request). A tenth of the requests are a prompt's first, so\n")
	w("every policy's p90 is a whole prefill; the engines' own mean (sim TTFT) shows the difference. TTFT as in the\n")
	w("routing benchmark.\n\n")
	w("| policy | GPU hit | loaded | computed | oracle | TTFT p50 | p90 | p99 | sim TTFT | ok |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range res {
		w("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %d/%d |\n", r.Policy, r.HitRate, r.LoadedRate,
			1-r.HitRate-r.LoadedRate, r.Oracle, r.Quantile(0.5), r.Quantile(0.9), r.Quantile(0.99), r.SimMeanTTFT, r.OK, r.Sent)
	}
	return b.String() + "\n"
}
