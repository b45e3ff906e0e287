package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/registry"
)

// The active-request score of llm-d's examples: the busiest pod 0, the
// others scaled by MaxBusyScore, those at most IdleThreshold 1.
func TestActiveRequestScore(t *testing.T) {
	for name, tc := range map[string]struct {
		score ActiveRequestScore
		own   []int64
		want  []float64
	}{
		"linear (maxBusyScore 1)":           {ActiveRequestScore{MaxBusyScore: 1}, []int64{3, 0, 6}, []float64{0.5, 1, 0}},
		"linear, some idle":                 {ActiveRequestScore{MaxBusyScore: 1}, []int64{4, 0, 1}, []float64{0, 1, 0.75}},
		"binary (the default): busy is 0":   {ActiveRequestScore{}, []int64{1, 0, 5}, []float64{0, 1, 0}},
		"idle up to 1, busy at most half":   {ActiveRequestScore{IdleThreshold: 1, MaxBusyScore: 0.5}, []int64{1, 2, 0, 4}, []float64{1, 0.25, 1, 0}},
		"nothing in flight: every pod is 1": {ActiveRequestScore{MaxBusyScore: 1}, []int64{0, 0}, []float64{1, 1}},
	} {
		t.Run(name, func(t *testing.T) {
			most := int64(0)
			for _, n := range tc.own {
				most = max(most, n)
			}
			got := make([]float64, len(tc.own))
			for i, n := range tc.own {
				got[i] = tc.score.score(n, most)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("scores (-want +got):\n%s", diff)
			}
		})
	}
}

// llm-d's load-aware score: 0.5 for an empty queue, down to 0 at the
// threshold, whatever the other pods' queues.
func TestLoadAwareScore(t *testing.T) {
	for _, tc := range []struct {
		waiting, threshold int
		want               float64
	}{
		{0, 128, 0.5}, {64, 128, 0.25}, {128, 128, 0}, {500, 128, 0}, {1, 4, 0.375},
	} {
		if got := loadAware(tc.waiting, tc.threshold); got != tc.want {
			t.Errorf("loadAware(%d waiting, threshold %d) = %v, want %v", tc.waiting, tc.threshold, got, tc.want)
		}
	}
}

// With the active-request score alone, a pod holding fewer of this
// picker's requests in flight comes first; with llm-d's default
// maxBusyScore of 0, every busy pod ties behind the idle ones.
func TestWeightedActiveRequestOrder(t *testing.T) {
	for name, tc := range map[string]struct {
		score    ActiveRequestScore
		inFlight []int
		want     []int // workers in the order picked; -1 where ties may fall either way
	}{
		"linear: fewest in flight first":       {ActiveRequestScore{MaxBusyScore: 1}, []int{4, 0, 2}, []int{1, 2, 0}},
		"idle threshold: the busiest last":     {ActiveRequestScore{IdleThreshold: 2, MaxBusyScore: 1}, []int{4, 2, 3}, []int{1, 2, 0}},
		"binary: the idle pod, then busy ones": {ActiveRequestScore{}, []int{3, 1, 0}, []int{2, -1, -1}},
	} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(len(tc.inFlight))
			for i, w := range ws {
				w.SetMetrics(&registry.Metrics{Waiting: 1, KVUsage: 0.5, Scraped: epoch})
				admit(t, w, tc.inFlight[i])
			}
			p := build(t, Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{
				LoadScores: LoadScores{ActiveRequestWeight: 1, ActiveRequest: tc.score}}}, reg, nil)
			for range 20 { // ties broken at random must not change the order
				got, err := p.Pick(&Request{}, ws, len(ws))
				if err != nil {
					t.Fatal(err)
				}
				for k, want := range tc.want {
					if want >= 0 && got[k] != ws[want] {
						t.Fatalf("picked %v, want worker %d in place %d (order %v)", addrs(got), want, k, tc.want)
					}
				}
			}
		})
	}
}

// The running score ranks by the scraped running requests, from the
// fewest to the most; a worker without fresh metrics counts the fresh
// workers' mean, so it is neither the idlest nor the busiest.
func TestWeightedRunningRequestsOrder(t *testing.T) {
	reg, ws := pool(4)
	for i, running := range []int{10, 2, 6} {
		ws[i].SetMetrics(&registry.Metrics{Running: running, Scraped: epoch})
	}
	ws[3].SetMetrics(&registry.Metrics{Running: 0, Scraped: epoch.Add(-time.Minute)}) // stale: 6, the mean
	p := build(t, Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{LoadScores: LoadScores{RunningWeight: 1}}}, reg, nil)
	got, err := p.Pick(&Request{}, ws[:3], 3)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(addrs([]*registry.Worker{ws[1], ws[2], ws[0]}), addrs(got)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	first, last := 0, 0
	for range 40 {
		got, err := p.Pick(&Request{}, ws, 4)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] == ws[3] {
			first++
		}
		if got[3] == ws[3] {
			last++
		}
		if got[0] != ws[1] || got[3] != ws[0] {
			t.Fatalf("order %v: want the worker running 2 first and the one running 10 last", addrs(got))
		}
	}
	if first != 0 || last != 0 {
		t.Errorf("the worker without fresh metrics came first %d and last %d times of 40, want never", first, last)
	}
}

// The load-aware score weighs a queue against a fixed threshold, not
// against the pool's longest queue as the queue score does: two pods past
// the threshold tie, where the queue score would still prefer the shorter.
func TestWeightedLoadAwareOrder(t *testing.T) {
	reg, ws := pool(3)
	for i, waiting := range []int{300, 0, 200} {
		ws[i].SetMetrics(&registry.Metrics{Waiting: waiting, Scraped: epoch})
	}
	cfg := Config{Name: WeightedScorer, QueueThreshold: 1000, WeightedScorer: WeightedScorerConfig{
		LoadScores: LoadScores{LoadAwareWeight: 1, LoadAwareThreshold: 128}}}
	p := build(t, cfg, reg, nil)
	second := map[*registry.Worker]int{}
	for range 40 {
		got, err := p.Pick(&Request{}, ws, 3)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != ws[1] {
			t.Fatalf("picked %v first, want the worker with an empty queue", got[0].Address())
		}
		second[got[1]]++
	}
	if second[ws[0]] == 0 || second[ws[2]] == 0 {
		t.Errorf("second place over 40 picks: %d for 300 waiting, %d for 200 waiting; want both past the threshold to tie", second[ws[0]], second[ws[2]])
	}
	// Within the threshold the shorter queue wins.
	cfg.WeightedScorer.LoadAwareThreshold = 1000
	got, err := build(t, cfg, reg, nil).Pick(&Request{}, ws, 3)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(addrs([]*registry.Worker{ws[1], ws[2], ws[0]}), addrs(got)); diff != "" {
		t.Errorf("order with threshold 1000 (-want +got):\n%s", diff)
	}
}

// With the no-hit and prefix scores, prompts no worker holds go to the
// worker least recently sent one, so new prefixes go round the pool; a
// prompt a worker holds scores 0.5 everywhere and moves no worker up the
// order.
func TestWeightedNoHitLRU(t *testing.T) {
	reg, ws := pool(3)
	for _, w := range ws {
		w.SetMetrics(&registry.Metrics{Scraped: epoch})
	}
	p := build(t, Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{PrefixWeight: 1, LoadScores: LoadScores{NoHitLRUWeight: 1}}}, reg, nil)
	cold := func(i int) *registry.Worker {
		t.Helper()
		got, err := p.Pick(chat(fmt.Sprint("cold-sys", i), fmt.Sprint("cold-user", i), 512, 256), ws, 1)
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	var order []*registry.Worker
	for i := range 3 {
		order = append(order, cold(i))
	}
	if order[0] == order[1] || order[1] == order[2] || order[0] == order[2] {
		t.Fatalf("the first three cold prompts went to %v, want each worker once", order)
	}
	for i := 3; i < 12; i++ {
		if got := cold(i); got != order[i%3] {
			t.Fatalf("cold prompt %d went to %s, want %s, the worker least recently sent one", i, got.Address(), order[i%3].Address())
		}
	}
	// Warm prompts (the first cold prompt, held by order[0]) tie
	// everywhere and stamp nothing: the next cold prompt still goes to
	// order[0], the least recently sent a cold one.
	for range 10 {
		if _, err := p.Pick(chat("cold-sys0", "cold-user0", 512, 256), ws, 1); err != nil {
			t.Fatal(err)
		}
	}
	if got := cold(100); got != order[0] {
		t.Errorf("after warm prompts a cold prompt went to %s, want %s: a warm prompt moved a worker up the order", got.Address(), order[0].Address())
	}
}

// The no-hit score of llm-d's examples: workers never sent a cold prompt
// score 1, the others 1 − r/(n−1) by how many candidates were sent theirs
// earlier.
func TestNoHitScore(t *testing.T) {
	reg, ws := pool(4)
	stamps := newNoHitStamps(reg)
	// ws[2], then ws[0], were last sent cold prompts; ws[1], ws[3] never.
	for _, w := range []*registry.Worker{ws[2], ws[0]} {
		stamps.chose(&pick{cold: true}, w)
	}
	p := &pick{}
	for _, w := range ws {
		p.cands = append(p.cands, candidate{w: w})
	}
	stamps.rank(p)
	got := make([]float64, len(ws))
	for i := range ws {
		got[i] = noHitScore(p, i)
	}
	if diff := cmp.Diff([]float64{0, 1, 1 - rankShare(2, 4), 1}, got); diff != "" {
		t.Errorf("scores (-want +got):\n%s", diff)
	}
}

// Setting the load scores' tuning alone keeps the default weights, and a
// load-aware threshold left out of a weighted load-aware score is llm-d's
// 128.
func TestLoadScoresDefaults(t *testing.T) {
	got := Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{LoadScores: LoadScores{ActiveRequest: ActiveRequestScore{IdleThreshold: 2}}}}.Default().WeightedScorer
	want := WeightedScorerConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3,
		LoadScores: LoadScores{ActiveRequest: ActiveRequestScore{IdleThreshold: 2}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaulted weighted scorer (-want +got):\n%s", diff)
	}
	got = Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{LoadScores: LoadScores{LoadAwareWeight: 1}}}.Default().WeightedScorer
	want = WeightedScorerConfig{LoadScores: LoadScores{LoadAwareWeight: 1, LoadAwareThreshold: 128}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a load score's weight alone (-want +got):\n%s", diff)
	}
}

// rankShare is r/(n−1), computed as noHitScore does.
func rankShare(r, n int) float64 { return float64(r) / float64(n-1) }

// Each pod's last cold pick is its own, whatever its ID: pods whose IDs
// are 1,024 apart (a picker that has seen that many pods come and go)
// take their turns with the others, not every other cold prompt each.
func TestWeightedNoHitLRUDistantIDs(t *testing.T) {
	reg, ws := distantPool(2)
	for _, w := range ws {
		w.SetMetrics(&registry.Metrics{Scraped: epoch})
	}
	p := build(t, Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{LoadScores: LoadScores{NoHitLRUWeight: 1}}}, reg, nil)
	got := counts(t, p, ws, 400, func(i int) *Request { return chat(fmt.Sprint("sys", i), fmt.Sprint("user", i), 512, 256) })
	want := map[string]int{}
	for _, w := range ws {
		want[w.Address()] = 100
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cold prompts by pod, IDs %d, %d, %d, %d (-want +got):\n%s", ws[0].ID(), ws[1].ID(), ws[2].ID(), ws[3].ID(), diff)
	}
}

// Without a prefix score every prompt is cold to the no-hit score, as
// upstream's no-hit-lru-scorer finds no prefix match without a
// prefix-cache-scorer: one prompt repeated goes round the pool.
func TestWeightedNoHitLRUWithoutPrefixScore(t *testing.T) {
	reg, ws := pool(3)
	for _, w := range ws {
		w.SetMetrics(&registry.Metrics{Scraped: epoch})
	}
	p := build(t, Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{LoadScores: LoadScores{NoHitLRUWeight: 1}}}, reg, nil)
	got := counts(t, p, ws, 30, func(int) *Request { return chat("sys", "user", 512, 256) })
	want := map[string]int{}
	for _, w := range ws {
		want[w.Address()] = 10
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("one prompt 30 times, by pod (-want +got):\n%s", diff)
	}
}

// The active-request score of a busy pod is its share below the busiest
// candidate's count: holding 2 where the busiest candidate holds 4 (and a
// pod not among the candidates 8) it scores 0.5, so it wins over the
// busiest when that one's queue scores less than 0.5 and loses when more.
func TestWeightedActiveRequestByTheBusiestCandidate(t *testing.T) {
	for name, tc := range map[string]struct {
		waiting int // the busiest candidate's, against 10 for the other: queue score 1 − waiting/10
		want    int
	}{
		"its queue scores 0.4: the pod holding 2 first": {6, 0},
		"its queue scores 0.6: the busiest first":       {4, 1},
	} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(3)
			for i, n := range []int{2, 4, 8} {
				admit(t, ws[i], n)
			}
			ws[0].SetMetrics(&registry.Metrics{Waiting: 10, Scraped: epoch})
			ws[1].SetMetrics(&registry.Metrics{Waiting: tc.waiting, Scraped: epoch})
			p := build(t, Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{QueueWeight: 1,
				LoadScores: LoadScores{ActiveRequestWeight: 1, ActiveRequest: ActiveRequestScore{MaxBusyScore: 1}}}}, reg, nil)
			got, err := p.Pick(&Request{}, []*registry.Worker{ws[1], ws[0]}, 1) // the busiest neither last nor alone
			if err != nil {
				t.Fatal(err)
			}
			if got[0] != ws[tc.want] {
				t.Errorf("picked %s, want %s", got[0].Address(), ws[tc.want].Address())
			}
		})
	}
}

// A pod without fresh metrics has the load-aware score of its estimated
// queue, not of an empty one: holding 3 more requests than the fresh pod
// with 1 waiting, its queue is 4, at the threshold, and the fresh pod wins.
func TestWeightedLoadAwareWithoutFreshMetrics(t *testing.T) {
	reg, ws := pool(2)
	ws[0].SetMetrics(&registry.Metrics{Waiting: 1, Scraped: epoch})
	ws[1].SetMetrics(&registry.Metrics{Scraped: epoch.Add(-time.Minute)}) // stale
	admit(t, ws[1], 3)
	p := build(t, Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{
		LoadScores: LoadScores{LoadAwareWeight: 1, LoadAwareThreshold: 4}}}, reg, nil)
	got, err := p.Pick(&Request{}, ws, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != ws[0] {
		t.Errorf("picked %s, want %s: the pod without fresh metrics scored as an empty queue", got[0].Address(), ws[0].Address())
	}
}

// A weighted pick allocates nothing but its result in steady state, with
// no load score weighted and with all of them (a cold prompt each time).
func TestWeightedPickAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops pooled picks at random under the race detector")
	}
	for name, load := range map[string]LoadScores{
		"no load score": {},
		"every load score": {ActiveRequestWeight: 1, ActiveRequest: ActiveRequestScore{MaxBusyScore: 1},
			RunningWeight: 1, LoadAwareWeight: 1, NoHitLRUWeight: 1},
	} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(8)
			for i, w := range ws[1:] {
				w.SetMetrics(&registry.Metrics{Waiting: i, Running: i, KVUsage: 0.1, Scraped: epoch})
				admit(t, w, i)
			}
			p := build(t, Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3, LoadScores: load}}, reg, nil)
			reqs := make([]*Request, 120)
			for i := range reqs {
				reqs[i] = chat(fmt.Sprint("sys", i), "user", 256, 64)
			}
			next := 0
			run := func() {
				if _, err := p.Pick(reqs[next%len(reqs)], ws, 3); err != nil {
					t.Fatal(err)
				}
				next++
			}
			for range 10 {
				run()
			}
			if allocs := testing.AllocsPerRun(100, run); allocs > 1 {
				t.Errorf("a steady-state pick allocates %v times, want at most 1 (the result)", allocs)
			}
		})
	}
}
