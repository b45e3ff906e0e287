package policy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

func TestEveryPolicyReturnsDistinctCandidates(t *testing.T) {
	for _, name := range allPolicies {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(6)
			p := build(t, Config{Name: name}, reg, nil)
			registrytest.Remove(reg, ws[5].Endpoint().Key)
			cands := append(slices.Clone(ws), ws[0], ws[1]) // duplicates too
			for _, n := range []int{0, 1, 3, 5, 10} {
				for i := range 20 {
					got, err := p.Pick(chat("sys", string(rune('a'+i)), 512, 128), cands, n)
					if err != nil {
						t.Fatalf("n=%d: %v", n, err)
					}
					want := min(max(n, 1), 5)
					if len(got) != want {
						t.Fatalf("n=%d: got %d workers, want %d", n, len(got), want)
					}
					seen := map[*registry.Worker]bool{}
					for _, w := range got {
						if seen[w] || w == ws[5] || !slices.Contains(ws, w) {
							t.Fatalf("n=%d: bad result %v (duplicate, removed or foreign)", n, addrs(got))
						}
						seen[w] = true
					}
				}
			}
		})
	}
}

// TestAppendPickKeepsWhatDstHolds: a pick appended to a slice the caller
// keeps leaves what the slice held, and its own workers are distinct even
// when they are among those; a failed pick returns the slice as it came.
func TestAppendPickKeepsWhatDstHolds(t *testing.T) {
	type appender interface {
		AppendPick(dst []*registry.Worker, req *Request, candidates []*registry.Worker, n int) ([]*registry.Worker, error)
	}
	for _, name := range allPolicies {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(4)
			p, ok := build(t, Config{Name: name}, reg, nil).(appender)
			if !ok {
				t.Fatal("the policy cannot append its pick")
			}
			held := []*registry.Worker{ws[0], ws[1]}
			got, err := p.AppendPick(slices.Clip(held), chat("sys", "q", 512, 128), ws, 3)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 5 || got[0] != ws[0] || got[1] != ws[1] {
				t.Fatalf("got %v, want %v then 3 picked", addrs(got), addrs(held))
			}
			if picked := got[2:]; len(slices.Compact(slices.SortedFunc(slices.Values(picked), byAddress))) != 3 {
				t.Errorf("picked %v, want 3 distinct workers", addrs(picked))
			}
			got, err = p.AppendPick(held, &Request{}, nil, 3)
			if !errors.Is(err, ErrNoCandidates) || !slices.Equal(got, held) {
				t.Errorf("no candidates: got %v, %v; want %v, ErrNoCandidates", addrs(got), err, addrs(held))
			}
		})
	}
}

func byAddress(a, b *registry.Worker) int { return strings.Compare(a.Address(), b.Address()) }

func addrs(ws []*registry.Worker) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Address()
	}
	return out
}

func TestNoCandidates(t *testing.T) {
	for _, name := range allPolicies {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(2)
			p := build(t, Config{Name: name}, reg, nil)
			if _, err := p.Pick(&Request{}, nil, 1); !errors.Is(err, ErrNoCandidates) {
				t.Errorf("no candidates: err = %v, want ErrNoCandidates", err)
			}
			reg.Replace(nil)
			if _, err := p.Pick(&Request{}, ws, 1); !errors.Is(err, ErrNoCandidates) {
				t.Errorf("all removed: err = %v, want ErrNoCandidates", err)
			}
		})
	}
}

func TestSaturation(t *testing.T) {
	full := func(at time.Time) *registry.Metrics {
		return &registry.Metrics{Waiting: 5, KVUsage: 0.8, Scraped: at}
	}
	cases := map[string]struct {
		cfg      Config
		metrics  []*registry.Metrics
		inFlight []int
		reserve  int
		overflow bool
		want     string // address, "saturated", or "any" (every worker, no error)
	}{
		"all full": {
			metrics: []*registry.Metrics{full(epoch), full(epoch)},
			want:    "saturated",
		},
		"one has room": {
			metrics: []*registry.Metrics{full(epoch), {Waiting: 5, KVUsage: 0.5, Scraped: epoch}},
			want:    "127.0.0.2:8000",
		},
		"queue alone is not saturation": {
			metrics: []*registry.Metrics{full(epoch), {Waiting: 50, KVUsage: 0.1, Scraped: epoch}},
			want:    "127.0.0.2:8000",
		},
		"stale metrics do not saturate": {
			metrics: []*registry.Metrics{full(epoch), full(epoch.Add(-time.Minute))},
			want:    "127.0.0.2:8000",
		},
		"in-flight cap": {
			cfg:      Config{MaxInFlight: 3},
			inFlight: []int{3, 4},
			want:     "saturated",
		},
		"under the in-flight cap": {
			cfg:      Config{MaxInFlight: 3},
			inFlight: []int{3, 2},
			want:     "127.0.0.2:8000",
		},
		"a reserve lowers the in-flight cap": {
			cfg:      Config{MaxInFlight: 4},
			inFlight: []int{3, 2},
			reserve:  1,
			want:     "127.0.0.2:8000",
		},
		"a reserve saturates what has room for higher priorities": {
			cfg:      Config{MaxInFlight: 4},
			inFlight: []int{3, 3},
			reserve:  1,
			want:     "saturated",
		},
		"a reserve leaves one place": {
			cfg:      Config{MaxInFlight: 2},
			inFlight: []int{1, 0},
			reserve:  5,
			want:     "127.0.0.2:8000",
		},
		"a reserve lowers the queue threshold": {
			metrics: []*registry.Metrics{{Waiting: 3, KVUsage: 0.9, Scraped: epoch}, {Waiting: 4, KVUsage: 0.9, Scraped: epoch}},
			reserve: 1,
			want:    "127.0.0.1:8000",
		},
		"custom thresholds": {
			cfg:     Config{QueueThreshold: 10, KVCacheThreshold: 0.95},
			metrics: []*registry.Metrics{full(epoch), {Waiting: 10, KVUsage: 0.95, Scraped: epoch}},
			want:    "127.0.0.1:8000",
		},
		"overflow: all past the thresholds, the pick is among them": {
			metrics:  []*registry.Metrics{full(epoch), full(epoch)},
			overflow: true,
			want:     "any",
		},
		"overflow keeps to a worker under the thresholds": {
			metrics:  []*registry.Metrics{full(epoch), {Waiting: 5, KVUsage: 0.5, Scraped: epoch}},
			overflow: true,
			want:     "127.0.0.2:8000",
		},
		"overflow keeps to a worker under the thresholds listed first": {
			metrics:  []*registry.Metrics{{Waiting: 5, KVUsage: 0.5, Scraped: epoch}, full(epoch)},
			overflow: true,
			want:     "127.0.0.1:8000",
		},
		"overflow stops at the in-flight cap": {
			cfg:      Config{MaxInFlight: 3},
			metrics:  []*registry.Metrics{full(epoch), full(epoch)},
			inFlight: []int{3, 3},
			overflow: true,
			want:     "saturated",
		},
		"overflow takes a worker past the thresholds under the in-flight cap": {
			cfg:      Config{MaxInFlight: 3},
			metrics:  []*registry.Metrics{full(epoch), full(epoch)},
			inFlight: []int{3, 1},
			overflow: true,
			want:     "127.0.0.2:8000",
		},
		"overflow leaves the reserve under the in-flight cap": {
			cfg:      Config{MaxInFlight: 4},
			metrics:  []*registry.Metrics{full(epoch), full(epoch)},
			inFlight: []int{3, 3},
			reserve:  1,
			overflow: true,
			want:     "saturated",
		},
	}
	for name, tc := range cases {
		for _, policy := range allPolicies {
			t.Run(name+"/"+policy, func(t *testing.T) {
				reg, ws := pool(2)
				for i, m := range tc.metrics {
					ws[i].SetMetrics(m)
				}
				for i, n := range tc.inFlight {
					admit(t, ws[i], n)
				}
				cfg := tc.cfg
				cfg.Name = policy
				p := build(t, cfg, reg, nil)
				got, err := p.Pick(&Request{Model: "m", Reserve: tc.reserve, Overflow: tc.overflow}, ws, 2)
				switch tc.want {
				case "saturated":
					if !errors.Is(err, ErrSaturated) {
						t.Fatalf("err = %v, want ErrSaturated", err)
					}
					return
				case "any":
					if err != nil || len(got) != 2 {
						t.Fatalf("got %v, %v; want both workers", addrs(got), err)
					}
					return
				}
				if err != nil || len(got) != 1 || got[0].Address() != tc.want {
					t.Fatalf("got %v, %v; want only %s", addrs(got), err, tc.want)
				}
			})
		}
	}
}

// With every worker equal, each policy spreads picks over all of them, and
// the order candidates come in does not change the spread.
func TestNoWorkerWinsByPosition(t *testing.T) {
	const workers, picks = 5, 1000
	for _, name := range allPolicies {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(workers)
			p := build(t, Config{Name: name}, reg, nil)
			shuffled := slices.Clone(ws)
			r := rand.New(rand.NewPCG(3, 4))
			for _, order := range [][]*registry.Worker{ws, shuffled} {
				got := counts(t, p, order, picks, func(int) *Request {
					r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
					return &Request{Model: "m"}
				})
				for _, w := range ws {
					if n := got[w.Address()]; n < picks/workers/2 || n > picks/workers*2 {
						t.Errorf("%s picked %d of %d times: %v", w.Address(), n, picks, got)
					}
				}
			}
		})
	}
}

func TestLeastLoadPolicies(t *testing.T) {
	for _, name := range []string{LeastLoad, PowerOfTwo, CacheAware} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(2)
			admit(t, ws[0], 3)
			admit(t, ws[1], 1)
			p := build(t, Config{Name: name}, reg, nil)
			for i := range 50 {
				got, err := p.Pick(&Request{Model: "m"}, ws, 2)
				if err != nil {
					t.Fatal(err)
				}
				if got[0] != ws[1] || got[1] != ws[0] {
					t.Fatalf("pick %d: %v, want the less loaded first", i, addrs(got))
				}
			}
		})
	}
}

func TestRoundRobinTakesTurns(t *testing.T) {
	reg, ws := pool(3)
	p := build(t, Config{Name: RoundRobin}, reg, nil)
	var got []string
	for range 6 {
		w, err := p.Pick(&Request{}, ws, 2)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, w[0].Address())
	}
	want := []string{"127.0.0.1:8000", "127.0.0.2:8000", "127.0.0.3:8000", "127.0.0.1:8000", "127.0.0.2:8000", "127.0.0.3:8000"}
	if !slices.Equal(want, got) {
		t.Errorf("turns = %v, want %v", got, want)
	}
}

// Each model takes its own turns: with two models of two pods each and
// their requests alternating (an embed-then-chat pipeline), every pod gets
// its share.
func TestRoundRobinTakesTurnsPerModel(t *testing.T) {
	reg, ws := pool(4)
	a := &registry.Served{Bases: []string{"a"}, Complete: true}
	b := &registry.Served{Bases: []string{"b"}, Complete: true}
	for i, w := range ws {
		served := a
		if i >= 2 {
			served = b
		}
		w.SetMetrics(&registry.Metrics{Served: served, Scraped: epoch})
	}
	p := build(t, Config{Name: RoundRobin}, reg, nil)
	counts := map[string]int{}
	for range 10 {
		for _, m := range []string{"a", "b"} {
			got, err := p.Pick(&Request{Model: m}, ws, 1)
			if err != nil {
				t.Fatal(err)
			}
			counts[got[0].Address()]++
		}
	}
	for _, w := range ws {
		if counts[w.Address()] != 5 {
			t.Fatalf("picks per pod %v, want 5 on each of the four", counts)
		}
	}
}

// Picks run while workers come and go; no pick returns a worker that was
// already removed when it started, and the index forgets every removed one.
func TestConcurrentPicksWithChurn(t *testing.T) {
	reg, ws := pool(8)
	p := build(t, Config{}, reg, nil)
	ix := p.(*engine).ranker.(*cacheAware).ix
	done := make(chan struct{})
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				cands := reg.Workers()
				if len(cands) == 0 {
					continue
				}
				removedBefore := map[*registry.Worker]bool{}
				for _, w := range cands {
					if w.Removed() {
						removedBefore[w] = true
					}
				}
				got, err := p.Pick(chat("sys", fmt.Sprint(g, i), 2048, 256), cands, 2)
				if err != nil && !errors.Is(err, ErrNoCandidates) {
					errs <- err
					return
				}
				for _, w := range got {
					if removedBefore[w] {
						errs <- fmt.Errorf("picked %s, removed before the pick", w.Address())
						return
					}
				}
			}
		}()
	}
	for round := range 50 {
		w := ws[round%len(ws)]
		registrytest.Remove(reg, w.Endpoint().Key)
		ws[round%len(ws)] = registrytest.Upsert(reg, w.Endpoint())
	}
	close(done)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Every entry left belongs to a live worker: none was orphaned by a
	// removal racing an insert.
	live := 0
	for _, w := range reg.Workers() {
		live += ix.Held(w.ID())
	}
	if st := ix.Stats(); st.Entries != live || st.Workers != len(ws) {
		t.Errorf("index has %d entries over %d workers; live workers hold %d over %d", st.Entries, st.Workers, live, len(ws))
	}
}
