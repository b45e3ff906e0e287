package policy

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// BenchmarkPick is one whole pick of a 32 KB chat prompt (a 16 KB system
// prompt shared by its tenant, a 16 KB conversation) on a warm index.
func BenchmarkPick(b *testing.B) {
	for _, workers := range []int{8, 100, 1000} {
		for _, name := range []string{CacheAware, WeightedScorer, LeastLoad} {
			b.Run(fmt.Sprintf("%s/workers=%d", name, workers), func(b *testing.B) {
				reg, ws := bigPool(workers)
				p, err := Build(Config{Name: name}, reg)
				if err != nil {
					b.Fatal(err)
				}
				systems := tenantSystems()
				for i := range 2000 {
					req := &Request{Model: "m", Prompt: [][]byte{systems[i%len(systems)], text(fmt.Sprint("conv", i), 16<<10)}}
					if _, err := p.Pick(req, ws, 1); err != nil {
						b.Fatal(err)
					}
				}
				reqs := make([]*Request, 64)
				for i := range reqs {
					reqs[i] = &Request{Model: "m", Prompt: [][]byte{systems[i%len(systems)], text(fmt.Sprint("conv", i), 16<<10)}}
				}
				timePicks(b, p, reqs, ws)
			})
		}
	}
}

// BenchmarkPickLoadScores is a weighted-scorer pick over workers with fresh
// metrics, with its default weights alone (scores=default) and with the
// load scores of llm-d's and upstream's other scorers weighted too
// (scores=all), too lightly to move a pick, so that both place the prompts
// alike and differ by the scores' own cost: of a 32 KB prompt on a warm
// index, and of a prompt shorter than a block, which no worker holds
// (cold: the no-hit score ranks the workers by their last cold pick).
func BenchmarkPickLoadScores(b *testing.B) {
	const w = 1e-9
	all := LoadScores{ActiveRequestWeight: w, ActiveRequest: ActiveRequestScore{MaxBusyScore: 1}, RunningWeight: w, LoadAwareWeight: w, NoHitLRUWeight: w}
	for _, workers := range []int{8, 100, 1000} {
		for _, scores := range []string{"default", "all"} {
			for _, cold := range []bool{false, true} {
				b.Run(fmt.Sprintf("workers=%d/scores=%s/cold=%v", workers, scores, cold), func(b *testing.B) {
					reg, ws := bigPool(workers)
					for i, w := range ws {
						w.SetMetrics(&registry.Metrics{Waiting: i % 5, Running: i % 7, KVUsage: float64(i%10) / 10, Scraped: time.Now()})
					}
					cfg := Config{Name: WeightedScorer, MetricsStaleness: Duration{time.Hour}, QueueThreshold: 1000,
						WeightedScorer: WeightedScorerConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3}}
					if scores == "all" {
						cfg.WeightedScorer.LoadScores = all
					}
					p, err := Build(cfg, reg)
					if err != nil {
						b.Fatal(err)
					}
					reqs := make([]*Request, 64)
					for i := range reqs {
						if cold {
							reqs[i] = &Request{Model: "m", Prompt: [][]byte{text(fmt.Sprint("q", i), 40)}}
						} else {
							reqs[i] = &Request{Model: "m", Prompt: [][]byte{text(fmt.Sprint("sys", i%8), 16<<10), text(fmt.Sprint("conv", i), 16<<10)}}
						}
					}
					warmPicks(b, p, reqs, ws, 3)
					timePicks(b, p, reqs, ws)
				})
			}
		}
	}
}

// BenchmarkPickLoRA is a pick of an adapter request over workers that list
// their models (a base model and 32 adapters) and report their LoRA state.
func BenchmarkPickLoRA(b *testing.B) {
	for _, workers := range []int{8, 100} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			reg, ws := bigPool(workers)
			names := make([]string, 32)
			for i := range names {
				names[i] = fmt.Sprintf("adapter-%02d", i)
			}
			served := &registry.Served{Bases: []string{"llama"}, Adapters: adaptersOf("llama", names...), Complete: true}
			for i, w := range ws {
				w.SetMetrics(&registry.Metrics{Served: served, Scraped: time.Now(),
					LoRA: &registry.LoRA{Max: 4, Active: []string{names[i%32], names[(i+1)%32]}}})
			}
			p, err := Build(Config{MetricsStaleness: Duration{time.Hour}}, reg)
			if err != nil {
				b.Fatal(err)
			}
			reqs := make([]*Request, 64)
			for i := range reqs {
				reqs[i] = &Request{Model: names[i%32], Prompt: [][]byte{text(fmt.Sprint("sys", i%32), 2<<10), text(fmt.Sprint("q", i), 200)}}
			}
			warmPicks(b, p, reqs, ws, 3)
			timePicks(b, p, reqs, ws)
		})
	}
}

// BenchmarkKnows is the check, with KV events on, of whether the index
// places a 32 KB prompt it holds, at 100 workers: a hash of the whole
// prompt and one lookup.
func BenchmarkKnows(b *testing.B) {
	reg, ws := bigPool(100)
	p, err := Build(Config{Name: CacheAware}, reg)
	if err != nil {
		b.Fatal(err)
	}
	req := &Request{Model: "m", Prompt: [][]byte{text("system", 30<<10), text("user", 2<<10)}}
	if _, err := p.Pick(req, ws, 1); err != nil {
		b.Fatal(err)
	}
	k := p.(interface{ Knows(*Request) bool })
	for b.Loop() {
		if !k.Knows(req) {
			b.Fatal("a prompt the index holds is not known")
		}
	}
}

// BenchmarkKnowsThenPick is what a request costs the policy with KV events
// on, when its index knows the prompt: Knows, then the pick, of a 32 KB
// prompt at 100 workers. With kept=true the request keeps the prompt's
// hashes from Knows to the pick (Request.Hashes), as the ext_proc server's
// requests do; with kept=false each call hashes the prompt.
func BenchmarkKnowsThenPick(b *testing.B) {
	for _, kept := range []bool{false, true} {
		b.Run(fmt.Sprintf("kept=%v", kept), func(b *testing.B) {
			reg, ws := bigPool(100)
			p, err := Build(Config{Name: CacheAware}, reg)
			if err != nil {
				b.Fatal(err)
			}
			var h Hashes
			req := &Request{Model: "m", Prompt: [][]byte{text("system", 30<<10), text("user", 2<<10)}}
			if kept {
				req.Hashes = &h
			}
			if _, err := p.Pick(req, ws, 1); err != nil {
				b.Fatal(err)
			}
			k := p.(interface{ Knows(*Request) bool })
			b.ReportAllocs()
			for b.Loop() {
				h.Reset()
				if !k.Knows(req) {
					b.Fatal("a prompt the index holds is not known")
				}
				if _, err := p.Pick(req, ws, 3); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPickRoles is a split request's two picks of a 32 KB prompt on a
// warm index, one over the decode pods and one over the prefill pods, of
// 1000 pods that list their model (800 decode, 200 prefill): the picks
// alternate between two candidate lists, both sampled.
func BenchmarkPickRoles(b *testing.B) {
	reg := registry.New()
	served := &registry.Served{Bases: []string{"m"}, Complete: true}
	for i := range 1000 {
		role := "decode"
		if i%5 == 0 {
			role = "prefill"
		}
		w := registrytest.Upsert(reg, registry.Endpoint{
			Key:     registry.Key{UID: fmt.Sprintf("pod-%d", i), Port: 8000},
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(i >> 8), byte(i + 1)}), 8000),
			Role:    registry.ParseRole(role, true),
		})
		w.SetMetrics(&registry.Metrics{Served: served, Scraped: time.Now()})
	}
	p, err := Build(Config{MetricsStaleness: Duration{time.Hour}}, reg)
	if err != nil {
		b.Fatal(err)
	}
	const tenants = 50
	reqs := make([]*Request, 64)
	for i := range reqs {
		reqs[i] = &Request{Model: "m", Prompt: [][]byte{text(fmt.Sprint("tenant", i%tenants), 16<<10), text(fmt.Sprint("conv", i), 16<<10)}}
	}
	split := func(req *Request) {
		got, err := p.Pick(req, reg.Decoders(), 1)
		if err != nil {
			b.Fatal(err)
		}
		pre := *req
		pre.Exclude = got[0]
		if _, err := p.Pick(&pre, reg.Prefillers(), 1); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 2000 {
		split(reqs[i%len(reqs)])
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		split(reqs[i%len(reqs)])
		i++
	}
}

// BenchmarkPickContextLength is BenchmarkPick's pick over a pool whose pods
// are labelled with context-length ranges, half for prompts up to 4096
// tokens and half for longer ones, filtered and (weighted scorer) scored.
func BenchmarkPickContextLength(b *testing.B) {
	for _, workers := range []int{8, 100, 1000} {
		for _, name := range []string{CacheAware, WeightedScorer} {
			b.Run(fmt.Sprintf("%s/workers=%d", name, workers), func(b *testing.B) {
				reg, ws := bigPool(workers)
				eps := make([]registry.Endpoint, len(ws))
				for i, w := range ws {
					eps[i] = w.Endpoint()
					eps[i].Context = registry.ContextRange{Min: 4096, Max: 131072, Labelled: true}
					if i%2 == 0 {
						eps[i].Context = registry.ContextRange{Max: 4096, Labelled: true}
					}
				}
				reg.Update(eps, nil)
				cfg := Config{Name: name, ContextLength: &ContextLengthConfig{Filter: true}}
				if name == WeightedScorer {
					cfg.WeightedScorer = WeightedScorerConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3, ContextLengthWeight: 3}
				}
				p, err := Build(cfg, reg)
				if err != nil {
					b.Fatal(err)
				}
				systems := tenantSystems()
				reqs := make([]*Request, 64)
				for i := range reqs {
					reqs[i] = &Request{Model: "m", Prompt: [][]byte{systems[i%len(systems)], text(fmt.Sprint("conv", i), 16<<10)}, Tokens: 32 << 10 / 4}
				}
				warmPicks(b, p, reqs, ws, 1)
				timePicks(b, p, reqs, ws)
			})
		}
	}
}

// warmPicks makes 2000 picks of reqs in turn over ws, each of n workers,
// which fill the index and the scores' state before a benchmark times
// picks.
func warmPicks(b *testing.B, p Policy, reqs []*Request, ws []*registry.Worker, n int) {
	b.Helper()
	for i := range 2000 {
		if _, err := p.Pick(reqs[i%len(reqs)], ws, n); err != nil {
			b.Fatal(err)
		}
	}
}

// tenantSystems are the 16 KB system prompts of the benchmarks' 50
// tenants.
func tenantSystems() [][]byte {
	systems := make([][]byte, 50)
	for i := range systems {
		systems[i] = text(fmt.Sprint("tenant", i), 16<<10)
	}
	return systems
}

// timePicks times picks of reqs in turn over ws, each of 3 workers.
func timePicks(b *testing.B, p Policy, reqs []*Request, ws []*registry.Worker) {
	b.Helper()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := p.Pick(reqs[i%len(reqs)], ws, 3); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkPickObjectives is BenchmarkPick's cache-aware pick of requests
// that state a TTFT objective, on a predictor that has learned from 64
// responses (slower on every other pod), so that the candidates split
// into pods predicted to meet it and pods predicted to miss it; with the
// prediction recorded for the primary.
func BenchmarkPickObjectives(b *testing.B) {
	for _, workers := range []int{8, 100, 1000} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			reg, ws := bigPool(workers)
			p, err := Build(Config{Name: CacheAware, SLO: &SLOConfig{}}, reg)
			if err != nil {
				b.Fatal(err)
			}
			systems := tenantSystems()
			var pr Prediction
			reqs := make([]*Request, 64)
			for i := range reqs {
				reqs[i] = &Request{Model: "m", Prompt: [][]byte{systems[i%len(systems)], text(fmt.Sprint("conv", i), 16<<10)},
					Tokens: 32 << 10 / 4, SLO: SLO{TTFT: 4 * time.Second}, Predicted: &pr}
			}
			lo := p.(LatencyObserver)
			for i := range 64 {
				if _, err := p.Pick(reqs[i], ws, 1); err != nil {
					b.Fatal(err)
				}
				ttft := time.Duration(reqs[i].Tokens) * time.Millisecond / 4
				if pr.worker.ID()%2 == 1 {
					ttft *= 4
				}
				lo.ObserveTTFT(&pr, ttft)
			}
			warmPicks(b, p, reqs, ws, 1)
			timePicks(b, p, reqs, ws)
		})
	}
}
