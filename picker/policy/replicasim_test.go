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
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// The model of sim_test.go with several picker replicas: each has its own
// registry (own worker objects, guards and index) over the same servers,
// requests reach a replica at random, and a replica learns the servers'
// queues only from scrapes every scrapeEvery (0: before every pick), its
// own share subtracted as the scraper does.

type replicaSim struct {
	pol   Policy
	ws    []*registry.Worker // by server
	clk   *clock
	index map[*registry.Worker]int
}

func simulateReplicas(t *testing.T, sc simConfig, cfg Config, replicas int, scrapeEvery time.Duration) simResult {
	t.Helper()
	r := rand.New(rand.NewPCG(11, 12))
	hasher := prefix.New()
	reps := make([]*replicaSim, replicas)
	for i := range reps {
		reg := registry.New()
		rs := &replicaSim{clk: &clock{t: epoch}, index: map[*registry.Worker]int{}}
		rs.ws = make([]*registry.Worker, sc.workers)
		for _, s := range rand.New(rand.NewPCG(uint64(i), 5)).Perm(sc.workers) {
			rs.ws[s] = registrytest.Upsert(reg, podEndpoint(fmt.Sprintf("pod-%d", s)))
			rs.index[rs.ws[s]] = s
		}
		rs.pol = build(t, cfg, reg, rs.clk)
		reps[i] = rs
	}

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
	running := make([]int, sc.workers)
	for i := range caches {
		caches[i] = newSimCache(sc.cacheBlocks)
		freeAt[i] = epoch
	}
	scrape := func(now time.Time) {
		for _, rs := range reps {
			for s, w := range rs.ws {
				pre, dec := w.Load()
				w.SetMetrics(&registry.Metrics{Waiting: queued[s], Running: running[s], BlockSize: 16,
					NumGPUBlocks: sc.cacheBlocks, Scraped: now, Own: pre + dec, OwnPrefill: pre})
			}
		}
	}
	var events simEvents
	var ttfts []time.Duration
	var blocks, cached int
	now := epoch
	nextScrape := epoch
	for n := range sc.requests {
		now = now.Add(time.Duration(r.ExpFloat64() / sc.rate * float64(time.Second)))
		for {
			at := nextScrape
			if scrapeEvery == 0 { // scraped before every pick instead
				if len(events) == 0 {
					break
				}
				at = events[0].at
			} else if len(events) > 0 && events[0].at.Before(at) {
				at = events[0].at
			}
			if at.After(now) {
				break
			}
			if scrapeEvery > 0 && at.Equal(nextScrape) {
				scrape(at)
				nextScrape = nextScrape.Add(scrapeEvery)
				continue
			}
			ev := heap.Pop(&events).(simEvent)
			s := ev.server
			if ev.first {
				ev.guard.FirstToken()
				queued[s]--
				running[s]++
			} else {
				ev.guard.Release()
				running[s]--
			}
		}
		if scrapeEvery == 0 {
			scrape(now)
		}
		rs := reps[r.IntN(len(reps))]
		rs.clk.t = now
		sess := &sessions[r.IntN(len(sessions))]
		sess.turns = append(sess.turns, text(fmt.Sprint("turn", n), sc.turnBytes))
		prompt := append([][]byte{systems[sess.tenant]}, sess.turns...)
		picked, err := rs.pol.Pick(&Request{Model: "m", Prompt: prompt}, rs.ws, 1)
		if err != nil {
			t.Fatalf("request %d: %v", n, err)
		}
		s := rs.index[picked[0]]
		hs := hasher.Hashes(nil, "m", "", prompt)
		hit := caches[s].serve(hs)
		blocks += len(hs)
		cached += hit
		start := now
		if freeAt[s].After(start) {
			start = freeAt[s]
		}
		first := start.Add(time.Duration(len(hs)-hit) * sc.prefillPerBlock)
		freeAt[s] = first
		queued[s]++
		g := picked[0].Admit()
		heap.Push(&events, simEvent{at: first, guard: g, first: true, server: s})
		heap.Push(&events, simEvent{at: first.Add(sc.decode), guard: g, server: s})
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

// TestSimulatedReplicas routes the workloads of TestSimulatedRouting, and
// one whose prompts rarely recur, through one picker and through three
// replicas that share nothing and read each other's load from scrapes every
// 50 ms. Where prompts recur, three replicas must keep most of one picker's
// hit ratio and stay within about twice its mean TTFT (each replica learns a
// third of the traffic; following the prefix's order where costs are close,
// rather than each its own view of the load, is what keeps them together);
// where they rarely do, within a quarter of its mean TTFT.
func TestSimulatedReplicas(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("simulation: skipped in -short and -race runs")
	}
	even, hot := simWorkloads()
	rare := even
	rare.tenants, rare.sessions, rare.systemBytes = 3000, 100000, 2<<10
	for _, tc := range []struct {
		name        string
		sc          simConfig
		hits, ttfts float64 // the least share of one picker's hit ratio, the most multiple of its mean TTFT
	}{
		{"even", even, 0.85, 2.2},
		{"hot tenant", hot, 0.82, 2.5},
		{"rare reuse", rare, 0, 1.25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			one := simulateReplicas(t, tc.sc, Config{}, 1, 50*time.Millisecond)
			three := simulateReplicas(t, tc.sc, Config{}, 3, 50*time.Millisecond)
			for n, res := range map[int]simResult{1: one, 3: three} {
				t.Logf("%d replicas: hit %.3f  mean TTFT %8v  p90 TTFT %8v", n, res.hitRatio,
					res.meanTTFT.Round(time.Microsecond), res.p90TTFT.Round(time.Microsecond))
			}
			if three.hitRatio < tc.hits*one.hitRatio {
				t.Errorf("3 replicas hit %.3f of prompt blocks, one picker %.3f: below %.2f of it", three.hitRatio, one.hitRatio, tc.hits)
			}
			if float64(three.meanTTFT) > tc.ttfts*float64(one.meanTTFT) {
				t.Errorf("3 replicas' mean TTFT %v is over %.2f × one picker's %v", three.meanTTFT, tc.ttfts, one.meanTTFT)
			}
		})
	}
}
