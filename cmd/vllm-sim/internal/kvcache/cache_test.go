package kvcache

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type counts struct {
	Used, Cached int
}

func state(c *Cache) counts { return counts{Used: c.Used(), Cached: c.Cached()} }

func TestAcquireReusesCachedPrefix(t *testing.T) {
	c := New(10)
	first, ok := c.Acquire([]uint64{1, 2, 3}, 1)
	if !ok {
		t.Fatal("first Acquire failed on an empty cache")
	}
	c.Release(first)
	if diff := cmp.Diff(counts{Used: 0, Cached: 3}, state(c)); diff != "" {
		t.Errorf("after release (-want +got):\n%s", diff)
	}
	if got := c.Match([]uint64{1, 2, 9, 3}); got != 2 {
		t.Errorf("Match = %d, want 2 (leading run only)", got)
	}
	second, ok := c.Acquire([]uint64{1, 2, 4}, 0)
	if !ok {
		t.Fatal("second Acquire failed")
	}
	if diff := cmp.Diff(counts{Used: 3, Cached: 4}, state(c)); diff != "" {
		t.Errorf("after second acquire (-want +got):\n%s", diff)
	}
	c.Release(second)
	if got := c.Usage(); got != 0 {
		t.Errorf("Usage after all releases = %v, want 0", got)
	}
}

func TestEvictionIsLeastRecentlyReleasedTailFirst(t *testing.T) {
	c := New(4)
	a, _ := c.Acquire([]uint64{1, 2}, 0)
	b, _ := c.Acquire([]uint64{3, 4}, 0)
	c.Release(a) // free order: 2, 1
	c.Release(b) // free order: 2, 1, 4, 3
	if _, ok := c.Acquire([]uint64{5}, 0); !ok {
		t.Fatal("Acquire with evictable space failed")
	}
	// Block 2 (tail of the oldest release) went first; 1 is still a prefix hit.
	cases := map[string]struct {
		hashes []uint64
		want   int
	}{
		"oldest prefix head survives": {hashes: []uint64{1, 2}, want: 1},
		"newer prefix intact":         {hashes: []uint64{3, 4}, want: 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := c.Match(tc.hashes); got != tc.want {
				t.Errorf("Match(%v) = %d, want %d", tc.hashes, got, tc.want)
			}
		})
	}
}

func TestReferencedBlocksAreNeverEvicted(t *testing.T) {
	c := New(4)
	held, _ := c.Acquire([]uint64{1, 2}, 1)
	if _, ok := c.Acquire([]uint64{7, 8}, 0); ok {
		t.Fatal("Acquire of 2 blocks succeeded with 1 free block")
	}
	if diff := cmp.Diff(counts{Used: 3, Cached: 2}, state(c)); diff != "" {
		t.Errorf("a failed Acquire changed the cache (-want +got):\n%s", diff)
	}
	if _, ok := c.Acquire([]uint64{7}, 0); !ok {
		t.Fatal("Acquire of the last free block failed")
	}
	if got := c.Match([]uint64{1, 2}); got != 2 {
		t.Errorf("held prefix matched %d blocks, want 2", got)
	}
	c.Release(held)
}

func TestAcquireCountsUnreferencedOwnBlocksAsNeeded(t *testing.T) {
	c := New(3)
	a, _ := c.Acquire([]uint64{1, 2}, 0)
	c.Release(a)
	// 1 and 2 are cached but free; taking them plus two more needs 4 > 3.
	if _, ok := c.Acquire([]uint64{1, 2}, 2); ok {
		t.Fatal("Acquire needing 4 blocks of 3 succeeded")
	}
	if _, ok := c.Acquire([]uint64{1, 2}, 1); !ok {
		t.Fatal("Acquire needing exactly the capacity failed")
	}
	if got := c.Usage(); got != 1 {
		t.Errorf("Usage = %v, want 1", got)
	}
}

// note is one observer notification: a stored run or a removed block.
type note struct {
	Stored  []uint64
	Parent  uint64 // of a stored run not at the start of its request
	Removed uint64
}

// recorder is an Observer that logs its notifications.
type recorder struct{ notes []note }

func (r *recorder) Stored(hashes []uint64, from, to int) {
	n := note{Stored: append([]uint64(nil), hashes[from:to]...)}
	if from > 0 {
		n.Parent = hashes[from-1]
	}
	r.notes = append(r.notes, n)
}

func (r *recorder) Removed(h uint64) { r.notes = append(r.notes, note{Removed: h}) }

func TestObserverIsToldRunsAfterEvictions(t *testing.T) {
	cases := map[string]struct {
		capacity int
		before   [][]uint64 // acquired and released first, in order
		acquire  []uint64
		anon     int
		want     []note
	}{
		"new prompt is one run": {
			capacity: 8, acquire: []uint64{1, 2, 3},
			want: []note{{Stored: []uint64{1, 2, 3}}},
		},
		"cached prefix is skipped, the rest chains to it": {
			capacity: 8, before: [][]uint64{{1, 2}}, acquire: []uint64{1, 2, 3, 4},
			want: []note{{Stored: []uint64{3, 4}, Parent: 2}},
		},
		"a cached block in the middle splits the runs": {
			capacity: 8, before: [][]uint64{{1}, {3}}, acquire: []uint64{1, 2, 3, 4},
			want: []note{{Stored: []uint64{2}, Parent: 1}, {Stored: []uint64{4}, Parent: 3}},
		},
		"fully cached stores nothing": {
			capacity: 8, before: [][]uint64{{1, 2}}, acquire: []uint64{1, 2}, anon: 1,
		},
		"evictions come first and do not split a run": {
			capacity: 3, before: [][]uint64{{7, 8, 9}}, acquire: []uint64{1, 2}, anon: 1,
			want: []note{{Removed: 9}, {Removed: 8}, {Removed: 7}, {Stored: []uint64{1, 2}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := New(tc.capacity)
			for _, hs := range tc.before {
				l, ok := c.Acquire(hs, 0)
				if !ok {
					t.Fatalf("Acquire(%v) failed", hs)
				}
				c.Release(l)
			}
			r := &recorder{}
			c.SetObserver(r)
			if _, ok := c.Acquire(tc.acquire, tc.anon); !ok {
				t.Fatalf("Acquire(%v, %d) failed", tc.acquire, tc.anon)
			}
			if diff := cmp.Diff(tc.want, r.notes); diff != "" {
				t.Errorf("notifications (-want +got):\n%s", diff)
			}
		})
	}
}

// replay is an Observer that keeps the set of blocks the notifications
// say are cached, and checks each notification against it.
type replay struct {
	t   *testing.T
	set map[uint64]bool
}

func (r replay) Stored(hashes []uint64, from, to int) {
	if from > 0 && !r.set[hashes[from-1]] {
		r.t.Errorf("run %v stored after %x, which is not cached", hashes[from:to], hashes[from-1])
	}
	for _, h := range hashes[from:to] {
		if r.set[h] {
			r.t.Errorf("block %x stored twice", h)
		}
		r.set[h] = true
	}
}

func (r replay) Removed(h uint64) {
	if !r.set[h] {
		r.t.Errorf("block %x removed but not cached", h)
	}
	delete(r.set, h)
}

func TestObserverSeesWhatTheCacheHolds(t *testing.T) {
	c := New(12)
	seen := replay{t: t, set: map[uint64]bool{}}
	c.SetObserver(seen)
	rng := rand.New(rand.NewPCG(1, 2))
	var leases []Lease
	for range 500 {
		if len(leases) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(leases))
			c.Release(leases[i])
			leases = append(leases[:i], leases[i+1:]...)
			continue
		}
		// Prompts share leading blocks: hash j of prompt p is p's prefix.
		p, n := uint64(rng.IntN(6)), 1+rng.IntN(5)
		hs := make([]uint64, n)
		for j := range hs {
			hs[j] = p%3*100 + uint64(j) + p/3*1000*uint64(min(j, 1))
		}
		if l, ok := c.Acquire(hs, rng.IntN(2)); ok {
			leases = append(leases, l)
		}
		want := map[uint64]bool{}
		for h := range c.blocks {
			want[h] = true
		}
		if diff := cmp.Diff(want, seen.set); diff != "" {
			t.Fatalf("cached blocks (-cache +notified):\n%s", diff)
		}
	}
}
