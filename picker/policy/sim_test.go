package policy

import (
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

// simulate runs sc through one picker that reads fresh metrics at every
// pick (replicasim_test.go).
func simulate(t *testing.T, sc simConfig, cfg Config) simResult {
	t.Helper()
	return simulateReplicas(t, sc, cfg, 1, 0)
}

// simWorkloads are the model's two workloads: 200 sessions over 16 tenants
// of even weight on 8 servers, and the same with one hot tenant.
func simWorkloads() (even, hot simConfig) {
	even = simConfig{
		workers: 8, tenants: 16, sessions: 200, requests: 3000,
		systemBytes: 8 << 10, turnBytes: 1 << 10, cacheBlocks: 4096,
		prefillPerBlock: 200 * time.Microsecond, decode: 2 * time.Second, rate: 100,
	}
	hot = even
	hot.hot, hot.rate = 0.6, 130
	return even, hot
}

// TestSimulatedRouting compares the policies on the model, with tenants of
// even weight and with one hot tenant. The default cache-aware policy must
// beat every baseline on both hit ratio and mean TTFT, and the threshold
// mode the cache-blind ones.
func TestSimulatedRouting(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("simulation: skipped in -short and -race runs")
	}
	base, hot := simWorkloads()
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
