package policy

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

var modes = []string{ModeCost, ModeThreshold}

// Requests sharing a long prefix stay on one worker while load builds up
// there, then spill to others once it is overloaded.
func TestCacheAwareSticksThenSpills(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			reg, ws := pool(4)
			p := build(t, Config{CacheAware: CacheAwareConfig{Mode: mode}}, reg, nil)
			// Warm the prefix on one worker, then keep every request in flight.
			first, err := p.Pick(chat("doc", "q0", 8<<10, 200), ws, 1)
			if err != nil {
				t.Fatal(err)
			}
			holder := first[0]
			// Decode load, so the holder looks busy to the load measure.
			for range 2 {
				g := holder.Admit()
				g.FirstToken()
				t.Cleanup(func() { g.Release() })
			}
			var seq []string
			spilled := -1
			for i := 1; i <= 60; i++ {
				got, err := p.Pick(chat("doc", fmt.Sprintf("q%d", i), 8<<10, 200), ws, 1)
				if err != nil {
					t.Fatal(err)
				}
				seq = append(seq, got[0].Address())
				g := got[0].Admit()
				g.FirstToken()
				t.Cleanup(func() { g.Release() })
				if got[0] != holder && spilled < 0 {
					spilled = i
				}
			}
			t.Logf("first spill at request %d: %v", spilled, seq)
			if spilled < 3 {
				t.Errorf("left the warm worker after %d requests, want it kept while lightly loaded: %v", spilled, seq)
			}
			if spilled < 0 {
				t.Errorf("never spilled from %s with 60 requests in flight: %v", holder.Address(), seq)
			}
			loads := map[string]int64{}
			for _, w := range ws {
				loads[w.Address()] = w.InFlight()
			}
			if loads[holder.Address()] >= 50 {
				t.Errorf("the warm worker took everything: %v", loads)
			}
		})
	}
}

// Unrelated prompts carry no affinity: they spread over the pool.
func TestCacheAwareSpreadsUnrelatedPrompts(t *testing.T) {
	const workers, picks = 8, 1000
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			reg, ws := pool(workers)
			p := build(t, Config{CacheAware: CacheAwareConfig{Mode: mode}}, reg, nil)
			got := counts(t, p, ws, picks, func(i int) *Request {
				return chat(fmt.Sprintf("sys%d", i), "u", 2048, 64)
			})
			for _, w := range ws {
				if n := got[w.Address()]; n < picks/workers*6/10 || n > picks/workers*14/10 {
					t.Errorf("%s got %d of %d picks: %v", w.Address(), n, picks, got)
				}
			}
		})
	}
}

// A prompt with a warm prefix goes back to its worker; an identical prompt
// for another model or cache salt does not know it.
func TestCacheAwareFollowsPrefix(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			reg, ws := pool(8)
			p := build(t, Config{CacheAware: CacheAwareConfig{Mode: mode}}, reg, nil)
			homes := map[string]*registry.Worker{}
			for i := range 8 {
				sys := fmt.Sprintf("tenant%d", i)
				got, err := p.Pick(chat(sys, "first", 8192, 100), ws, 1)
				if err != nil {
					t.Fatal(err)
				}
				homes[sys] = got[0]
			}
			for round := range 5 {
				for sys, home := range homes {
					got, _ := p.Pick(chat(sys, fmt.Sprint("again", round), 8192, 100), ws, 1)
					if got[0] != home {
						t.Errorf("%s went to %s, want its warm worker %s", sys, got[0].Address(), home.Address())
					}
				}
			}
			other := 0
			for sys, home := range homes {
				req := chat(sys, "x", 8192, 100)
				req.CacheSalt = "salted"
				if got, _ := p.Pick(req, ws, 1); got[0] != home {
					other++
				}
			}
			if other == 0 {
				t.Errorf("salted requests all went to the unsalted prefix holders")
			}
		})
	}
}

func TestCacheAwareForgetsRemovedWorker(t *testing.T) {
	reg, ws := pool(3)
	p := build(t, Config{}, reg, nil)
	req := chat("doc", "q", 4096, 100)
	got, err := p.Pick(req, ws, 1)
	if err != nil {
		t.Fatal(err)
	}
	gone := got[0]
	ix := p.(*engine).ranker.(*cacheAware).ix
	if ix.Held(gone.ID()) == 0 {
		t.Fatalf("the picked worker holds no block after a pick")
	}
	registrytest.Remove(reg, gone.Endpoint().Key)
	if n := ix.Held(gone.ID()); n != 0 {
		t.Errorf("removed worker still holds %d blocks", n)
	}
	if st := ix.Stats(); st.Entries != 0 {
		t.Errorf("index keeps %d entries of a removed worker", st.Entries)
	}
	for range 50 {
		got, err := p.Pick(req, ws, 3) // a stale candidate list still names it
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range got {
			if w == gone {
				t.Fatalf("picked the removed worker %s", gone.Address())
			}
		}
	}
}

// A worker parked while its pod is unready (its server running on) keeps
// its index entries and calibration: it gets no picks while parked, and
// once back its prompts go to it again, not where a cold index sends them.
func TestCacheAwareKeepsAFlappedWorkersHistory(t *testing.T) {
	reg, ws := pool(4)
	p := build(t, Config{}, reg, nil)
	req := chat("doc", "q", 8192, 100)
	cold, err := build(t, Config{}, reg, nil).Pick(req, ws, 1)
	if err != nil {
		t.Fatal(err)
	}
	warm := ws[0]
	if cold[0] == warm {
		warm = ws[1]
	}
	p.Observe(req, warm)
	ix := p.(*engine).ranker.(*cacheAware).ix
	held := ix.Held(warm.ID())

	ep := warm.Endpoint()
	ep.Unready = true
	reg.Update([]registry.Endpoint{ep}, nil)
	for range 20 {
		got, err := p.Pick(chat("other", "q", 8192, 100), ws, 4) // a stale candidate list still names it
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(got, warm) {
			t.Fatalf("picked the parked worker %s", warm.Address())
		}
	}
	if n := ix.Held(warm.ID()); n != held {
		t.Errorf("the parked worker holds %d blocks, want the %d it held", n, held)
	}

	ep.Unready = false
	reg.Update([]registry.Endpoint{ep}, nil)
	got, err := p.Pick(req, reg.Workers(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != warm {
		t.Errorf("back from the flap the prompt went to %s, want the worker that holds it, %s (a cold index sends it to %s)",
			got[0].Address(), warm.Address(), cold[0].Address())
	}
}

func TestCacheAwareIgnoresStaleMetrics(t *testing.T) {
	clk := &clock{t: epoch}
	reg, ws := pool(2)
	p := build(t, Config{MetricsStaleness: Duration{3 * time.Second}}, reg, clk)
	ws[0].SetMetrics(&registry.Metrics{Waiting: 4, Scraped: epoch})
	fresh := counts(t, p, ws, 100, func(int) *Request { return &Request{Model: "m"} })
	if fresh[ws[0].Address()] != 0 {
		t.Errorf("a worker with a fresh queue of 4 was picked over an idle one: %v", fresh)
	}
	clk.t = epoch.Add(4 * time.Second)
	stale := counts(t, p, ws, 100, func(int) *Request { return &Request{Model: "m"} })
	if stale[ws[0].Address()] < 20 {
		t.Errorf("a worker with a stale queue still avoided: %v", stale)
	}
}

// The gateway served a fallback: the next request with that prompt goes to
// the worker that has it now.
func TestCacheAwareObserve(t *testing.T) {
	reg, ws := pool(4)
	p := build(t, Config{}, reg, nil)
	req := chat("doc", "q", 8192, 100)
	got, err := p.Pick(req, ws, 2)
	if err != nil {
		t.Fatal(err)
	}
	primary, fallback := got[0], got[1]
	registrytest.Remove(reg, primary.Endpoint().Key)
	p.Observe(req, fallback)
	again, _ := p.Pick(req, ws, 1)
	if again[0] != fallback {
		t.Errorf("after serving on %s the prompt went to %s", fallback.Address(), again[0].Address())
	}
}

func TestWeightedScorer(t *testing.T) {
	reg, ws := pool(3)
	p := build(t, Config{Name: WeightedScorer}, reg, nil)
	ws[0].SetMetrics(&registry.Metrics{Waiting: 4, KVUsage: 0.5, Scraped: epoch})
	ws[1].SetMetrics(&registry.Metrics{Waiting: 0, KVUsage: 0.2, Scraped: epoch})
	ws[2].SetMetrics(&registry.Metrics{Waiting: 2, KVUsage: 0.9, Scraped: epoch})
	got, err := p.Pick(&Request{Model: "m"}, ws, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Scores: 2·0+2·0.5 = 1, 2·1+2·0.8 = 3.6, 2·0.5+2·0.1 = 1.2.
	want := []string{"127.0.0.2:8000", "127.0.0.3:8000", "127.0.0.1:8000"}
	if diff := fmt.Sprint(addrs(got)); diff != fmt.Sprint(want) {
		t.Errorf("order = %v, want %v", addrs(got), want)
	}
	// A full prefix match (3 points) outweighs the queue and KV lead of
	// 127.0.0.2 over 127.0.0.3 (2.4 points).
	req := chat("doc", "q", 4096, 0)
	if _, err := p.Pick(req, []*registry.Worker{ws[2]}, 1); err != nil {
		t.Fatal(err)
	}
	got, _ = p.Pick(req, ws, 1)
	if got[0] != ws[2] {
		t.Errorf("prefix holder not preferred: got %s", got[0].Address())
	}
}

func TestIndexStats(t *testing.T) {
	reg, ws := pool(2)
	p := build(t, Config{}, reg, nil)
	req := chat("doc", "q", 4096, 0)
	for range 2 {
		if _, err := p.Pick(req, ws, 1); err != nil {
			t.Fatal(err)
		}
	}
	st, ok := p.(interface{ IndexStats() (prefix.Stats, bool) }).IndexStats()
	if !ok || st.Blocks != 64 || st.HitRatio() != 0.5 {
		t.Errorf("stats = %+v (ok %v), want 64 blocks and half the lookups hit", st, ok)
	}
	rr := build(t, Config{Name: RoundRobin}, reg, nil)
	if _, ok := rr.(interface{ IndexStats() (prefix.Stats, bool) }).IndexStats(); ok {
		t.Errorf("round-robin reports an index")
	}
}

// The picker asks the model servers where a prompt is cached only when its
// own index cannot place it (Knows). A system prompt every conversation
// shares must not make a conversation another replica routed look known,
// or its later turns are never found where they are cached.
func TestKnowsAPromptOnlyUpToItsLastTurns(t *testing.T) {
	reg, ws := pool(4)
	p := build(t, Config{}, reg, nil)
	k, ok := p.(interface{ Knows(*Request) bool })
	if !ok {
		t.Fatal("the cache-aware policy has no Knows")
	}
	turn := func(conversation string, turns int) *Request {
		r := &Request{Model: "m", Prompt: [][]byte{text("system", 1<<10)}}
		for i := range turns {
			r.Prompt = append(r.Prompt, text(fmt.Sprintf("%s turn %d", conversation, i), 600))
		}
		return r
	}
	if _, err := p.Pick(turn("alice", 3), ws, 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  *Request
		want bool
	}{
		{"a conversation routed elsewhere, sharing only the system prompt", turn("bob", 5), false},
		{"the next turn of a conversation routed here", turn("alice", 4), true},
		{"a conversation's first turn: the system prompt and one question", turn("carol", 1), true},
		{"two turns past the ones routed here", turn("alice", 5), false},
		{"a prompt shorter than the tail that matters", &Request{Model: "m", Prompt: [][]byte{text("short", 900)}}, true},
	} {
		if got := k.Knows(tc.req); got != tc.want {
			t.Errorf("%s: Knows = %v, want %v", tc.name, got, tc.want)
		}
	}

	// The worker that holds alice's turns is parked (its pod unready):
	// where the prompt goes meanwhile is for the servers to say.
	got, err := p.Pick(turn("alice", 3), ws, 1)
	if err != nil {
		t.Fatal(err)
	}
	ep := got[0].Endpoint()
	ep.Unready = true
	reg.Update([]registry.Endpoint{ep}, nil)
	if k.Knows(turn("alice", 4)) {
		t.Error("a prompt held only by a parked worker is known")
	}
	ep.Unready = false
	reg.Update([]registry.Endpoint{ep}, nil)
	if !k.Knows(turn("alice", 4)) {
		t.Error("back from its flap, the worker's prompt is not known")
	}
}

// A request's Hashes carry its prompt from Knows to the pick, which places
// the prompt as a pick without them does; emptied by Reset they serve the
// next request's prompt, not the last one's.
func TestRequestHashesServeOneRequestAtATime(t *testing.T) {
	reg, ws := pool(4)
	p := build(t, Config{}, reg, nil)
	k := p.(interface{ Knows(*Request) bool })
	var h Hashes
	first := &Request{Model: "m", Prompt: [][]byte{text("first", 4<<10)}, Hashes: &h}
	if k.Knows(first) {
		t.Fatal("Knows = true for a prompt never picked")
	}
	if _, err := p.Pick(first, ws, 1); err != nil {
		t.Fatal(err)
	}
	if !k.Knows(&Request{Model: "m", Prompt: first.Prompt}) {
		t.Error("Knows = false, after a pick with the request's hashes, for the prompt it placed")
	}
	h.Reset()
	second := &Request{Model: "m", Prompt: [][]byte{text("second", 4<<10)}, Hashes: &h}
	if k.Knows(second) {
		t.Error("Knows = true for a prompt never picked, with the hashes of a prompt picked before reset")
	}
}

// Reset keeps the memory of a prompt's hashes for the next request up to a
// bound: a pooled request that once carried a huge prompt does not pin its
// hashes (an eighth of its size) for good.
func TestHashesResetLetsGoOfAHugePromptsHashes(t *testing.T) {
	reg, ws := pool(4)
	p := build(t, Config{}, reg, nil)
	for _, tc := range []struct {
		size int
		kept bool
	}{{maxKeptPrompt / 2, true}, {4 * maxKeptPrompt, false}} {
		var h Hashes
		if _, err := p.Pick(&Request{Model: "m", Prompt: [][]byte{text("p", tc.size)}, Hashes: &h}, ws, 1); err != nil {
			t.Fatal(err)
		}
		h.Reset()
		if kept := cap(h.sums) > 0; kept != tc.kept {
			t.Errorf("a %d-byte prompt's hashes kept after Reset: %v (capacity %d), want %v", tc.size, kept, cap(h.sums), tc.kept)
		}
	}
}

// Knows and the pick after it, sharing the request's hashes, allocate
// nothing but the pick's result in steady state.
func TestKnowsAndPickAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops pooled picks at random under the race detector")
	}
	reg, ws := pool(8)
	p := build(t, Config{}, reg, nil)
	k := p.(interface{ Knows(*Request) bool })
	var h Hashes
	req := &Request{Model: "m", Prompt: [][]byte{text("sys", 16<<10), text("user", 16<<10)}, Hashes: &h}
	run := func() {
		h.Reset()
		k.Knows(req)
		if _, err := p.Pick(req, ws, 3); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		run()
	}
	if allocs := testing.AllocsPerRun(100, run); allocs > 1 {
		t.Errorf("Knows and a pick allocate %v times, want at most 1 (the result)", allocs)
	}
}
