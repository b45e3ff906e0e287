package policy

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
)

// A small discrete-event model of a pool serving multi-turn chats, to
// compare policies on what users notice: time to first token and how much
// of each prompt was already cached. Each simulated server prefills one
// request at a time (the costly phase, proportional to its uncached blocks)
// and decodes in the background; its real prefix cache is an exact LRU of
// block hashes. Guards, metrics and the clock are the real ones.

type simConfig struct {
	workers, tenants, sessions, requests int
	systemBytes, turnBytes               int
	cacheBlocks                          int
	prefillPerBlock, decode              time.Duration
	rate                                 float64 // requests per second
	// hot sends this share of the sessions to tenant 0.
	hot float64
}

type simResult struct {
	meanTTFT, p90TTFT time.Duration
	hitRatio          float64
}

// simCache is a server's real prefix cache: an exact LRU of block hashes,
// which is what a one-shard prefix index holding one worker is.
type simCache struct {
	ix      *prefix.Index
	cap     int
	scratch prefix.Scratch
}

func newSimCache(capacity int) *simCache {
	c := &simCache{ix: prefix.New(prefix.WithShards(1)), cap: capacity}
	c.ix.AddWorker(1)
	return c
}

// serve returns how many leading blocks were cached and caches them all.
func (c *simCache) serve(hs []uint64) (cached int) {
	if m := c.ix.Match(hs, &c.scratch); len(m) > 0 {
		cached = m[0].Blocks
	}
	c.ix.Insert(1, c.cap, hs)
	return cached
}

type simEvent struct {
	at     time.Time
	guard  *registry.Guard
	first  bool // the first token; else the end
	server int  // replicasim_test.go
}

type simEvents []simEvent

func (e simEvents) Len() int           { return len(e) }
func (e simEvents) Less(i, j int) bool { return e[i].at.Before(e[j].at) }
func (e simEvents) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *simEvents) Push(x any)        { *e = append(*e, x.(simEvent)) }
func (e *simEvents) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

func simulate(t *testing.T, sc simConfig, cfg Config) simResult {
	t.Helper()
	reg, ws := pool(sc.workers)
	clk := &clock{t: epoch}
	p := build(t, cfg, reg, clk)
	r := rand.New(rand.NewPCG(11, 12))
	hasher := prefix.New()

	systems := make([][]byte, sc.tenants)
	for i := range systems {
		systems[i] = text(fmt.Sprint("system", i), sc.systemBytes)
	}
	type session struct {
		tenant int
		turns  [][]byte
	}
	sessions := make([]session, sc.sessions)
	for i := range sessions {
		sessions[i].tenant = r.IntN(sc.tenants)
		if r.Float64() < sc.hot {
			sessions[i].tenant = 0
		}
	}
	caches := make([]*simCache, sc.workers)
	freeAt := make([]time.Time, sc.workers)
	queued := make([]int, sc.workers)
	for i := range caches {
		caches[i] = newSimCache(sc.cacheBlocks)
		freeAt[i] = epoch
	}
	index := map[*registry.Worker]int{}
	for i, w := range ws {
		index[w] = i
	}
	var events simEvents
	var ttfts []time.Duration
	var blocks, cached int
	now := epoch
	for n := range sc.requests {
		now = now.Add(time.Duration(r.ExpFloat64() / sc.rate * float64(time.Second)))
		for len(events) > 0 && !events[0].at.After(now) {
			ev := heap.Pop(&events).(simEvent)
			if ev.first {
				ev.guard.FirstToken()
				queued[index[ev.guard.Worker()]]--
			} else {
				ev.guard.Release()
			}
		}
		clk.t = now
		for i, w := range ws {
			w.SetMetrics(&registry.Metrics{Waiting: queued[i], BlockSize: 16, NumGPUBlocks: sc.cacheBlocks, Scraped: now})
		}
		s := &sessions[r.IntN(len(sessions))]
		s.turns = append(s.turns, text(fmt.Sprint("turn", n), sc.turnBytes))
		prompt := append([][]byte{systems[s.tenant]}, s.turns...)
		picked, err := p.Pick(&Request{Model: "m", Prompt: prompt}, ws, 1)
		if err != nil {
			t.Fatalf("request %d: %v", n, err)
		}
		w := index[picked[0]]
		hs := hasher.Hashes(nil, "m", "", prompt)
		hit := caches[w].serve(hs)
		blocks += len(hs)
		cached += hit
		start := now
		if freeAt[w].After(start) {
			start = freeAt[w]
		}
		first := start.Add(time.Duration(len(hs)-hit) * sc.prefillPerBlock)
		freeAt[w] = first
		queued[w]++
		g := picked[0].Admit()
		heap.Push(&events, simEvent{at: first, guard: g, first: true})
		heap.Push(&events, simEvent{at: first.Add(sc.decode), guard: g})
		ttfts = append(ttfts, first.Sub(now))
	}
	for _, ev := range events {
		ev.guard.Release()
	}
	slices.Sort(ttfts)
	var sum time.Duration
	for _, d := range ttfts {
		sum += d
	}
	return simResult{
		meanTTFT: sum / time.Duration(len(ttfts)),
		p90TTFT:  ttfts[len(ttfts)*9/10],
		hitRatio: float64(cached) / float64(blocks),
	}
}

// TestSimulatedRouting compares the policies on the model, with tenants of
// even weight and with one hot tenant. The default cache-aware policy must
// beat every baseline on both hit ratio and mean TTFT, and the threshold
// mode the cache-blind ones.
func TestSimulatedRouting(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("simulation: skipped in -short and -race runs")
	}
	base := simConfig{
		workers: 8, tenants: 16, sessions: 200, requests: 3000,
		systemBytes: 8 << 10, turnBytes: 1 << 10, cacheBlocks: 4096,
		prefillPerBlock: 200 * time.Microsecond, decode: 2 * time.Second, rate: 100,
	}
	hot := base
	hot.hot, hot.rate = 0.6, 130
	policies := []struct {
		name string
		cfg  Config
	}{
		{"round-robin", Config{Name: RoundRobin}},
		{"least-load", Config{Name: LeastLoad}},
		{"weighted-scorer", Config{Name: WeightedScorer}},
		{"cache-aware/threshold", Config{CacheAware: CacheAwareConfig{Mode: ModeThreshold}}},
		{"cache-aware", Config{}},
	}
	beats := map[string][]string{
		"cache-aware":           {"round-robin", "least-load", "weighted-scorer"},
		"cache-aware/threshold": {"round-robin", "least-load"},
	}
	for name, sc := range map[string]simConfig{"even": base, "hot tenant": hot} {
		t.Run(name, func(t *testing.T) {
			results := map[string]simResult{}
			for _, pc := range policies {
				res := simulate(t, sc, pc.cfg)
				results[pc.name] = res
				t.Logf("%-22s hit %.3f  mean TTFT %8v  p90 TTFT %8v", pc.name, res.hitRatio,
					res.meanTTFT.Round(time.Microsecond), res.p90TTFT.Round(time.Microsecond))
			}
			for winner, losers := range beats {
				w := results[winner]
				for _, loser := range losers {
					l := results[loser]
					if w.hitRatio <= l.hitRatio || float64(w.meanTTFT) >= 0.95*float64(l.meanTTFT) {
						t.Errorf("%s (%+v) does not beat %s (%+v)", winner, w, loser, l)
					}
				}
			}
		})
	}
}
