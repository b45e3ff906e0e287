package prefix

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hugeCapacity is what a model server claiming 10^9 KV blocks of 16 tokens
// would be granted in prompt blocks.
const hugeCapacity = 1_000_000_000 * 16 * 4 / BlockSize

func TestCapBoundsIndexWhateverWorkersClaim(t *testing.T) {
	cases := map[string]struct {
		shards, maxBlocks, workers int
		wantCapacity               int
	}{
		"one shard":             {shards: 1, maxBlocks: 1000, workers: 3, wantCapacity: 1000},
		"sharded, rounded down": {shards: 4, maxBlocks: 1002, workers: 3, wantCapacity: 1000},
		"more workers than cap": {shards: 2, maxBlocks: 8, workers: 20, wantCapacity: 8},
		"cap below shard count": {shards: 16, maxBlocks: 3, workers: 2, wantCapacity: 16},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ix := New(WithShards(tc.shards), WithMaxBlocks(tc.maxBlocks))
			if got := ix.Capacity(); got != tc.wantCapacity {
				t.Fatalf("capacity = %d, want %d", got, tc.wantCapacity)
			}
			for id := range tc.workers {
				ix.AddWorker(uint32(id) + 1)
			}
			var hs []uint64
			for i := range 500 {
				hs = ix.Hashes(hs, "m", "", [][]byte{[]byte(fmt.Sprintf("%08d", i)), text('u', 40*BlockSize)})
				ix.Insert(uint32(i%tc.workers)+1, hugeCapacity, hs)
				if st := ix.Stats(); st.Entries > tc.wantCapacity {
					t.Fatalf("after prompt %d the index holds %d entries, cap %d", i, st.Entries, tc.wantCapacity)
				}
			}
			if st := ix.Stats(); st.Capacity != tc.wantCapacity {
				t.Errorf("stats capacity = %d, want %d", st.Capacity, tc.wantCapacity)
			}
		})
	}
}

// Workers that join after others filled the index get room at once, and the
// index stays within its cap throughout.
func TestCapMakesRoomForJoiningWorkers(t *testing.T) {
	const maxBlocks = 400
	ix := New(WithShards(1), WithMaxBlocks(maxBlocks))
	ix.AddWorker(1)
	for i := range 20 {
		ix.Insert(1, hugeCapacity, ix.Hashes(nil, "m", "", [][]byte{text(byte(i), 40*BlockSize)}))
	}
	if got := ix.WorkerBlocks(1); got != maxBlocks {
		t.Fatalf("a lone worker holds %d blocks, want the whole cap %d", got, maxBlocks)
	}
	for id := uint32(2); id <= 4; id++ {
		ix.AddWorker(id)
		for i := range 20 {
			ix.Insert(id, hugeCapacity, ix.Hashes(nil, "m", "", [][]byte{text(byte(100+i), 40*BlockSize)}))
			if n := ix.Stats().Entries; n > maxBlocks {
				t.Fatalf("worker %d, prompt %d: %d entries, cap %d", id, i, n, maxBlocks)
			}
		}
	}
	got := map[uint32]int{}
	for id := uint32(1); id <= 4; id++ {
		got[id] = ix.WorkerBlocks(id)
	}
	// Each newcomer made room by evicting from whoever held the most, so
	// every worker ends at its fair share of 400 among four.
	want := map[uint32]int{1: 100, 2: 100, 3: 100, 4: 100}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("blocks per worker (-want +got):\n%s", diff)
	}
}

// Under the cap eviction stays least-recently-used per worker: a prompt used
// again survives the newer ones that push the index to its cap.
func TestCapEvictsLeastRecentlyUsed(t *testing.T) {
	ix := New(WithShards(1), WithMaxBlocks(200))
	ix.AddWorker(1)
	ix.AddWorker(2)
	hot := ix.Hashes(nil, "m", "", [][]byte{text('h', 10*BlockSize)})
	cold := ix.Hashes(nil, "m", "", [][]byte{text('c', 10*BlockSize)})
	ix.Insert(1, hugeCapacity, hot)
	ix.Insert(1, hugeCapacity, cold)
	for i := range 30 {
		ix.Insert(1, hugeCapacity, hot)
		ix.Insert(1, hugeCapacity, ix.Hashes(nil, "m", "", [][]byte{text(byte(i), 10*BlockSize)}))
	}
	var s1, s2 Scratch
	got := map[string][]Match{"hot": ix.Match(hot, &s1), "cold": ix.Match(cold, &s2)}
	want := map[string][]Match{"hot": {{Worker: 1, Blocks: 10}}, "cold": {}}
	if diff := cmp.Diff(want, got, cmpEmpty); diff != "" {
		t.Errorf("matches (-want +got):\n%s", diff)
	}
	if n := ix.WorkerBlocks(1); n != 100 {
		t.Errorf("worker 1 holds %d blocks, want its share 100", n)
	}
}

var cmpEmpty = cmp.Transformer("empty", func(m []Match) []Match {
	if len(m) == 0 {
		return nil
	}
	return m
})

// WorkerBlocks counts the blocks the worker holds by visiting every shard,
// 0 if it is unknown: the reference Held's counter is checked against.
func (ix *Index) WorkerBlocks(id uint32) int {
	ix.mu.RLock()
	slot, ok := ix.slotOf[id]
	ix.mu.RUnlock()
	if !ok {
		return 0
	}
	total := 0
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.Lock()
		if int(slot) < len(sh.lrus) {
			total += sh.lrus[slot].n
		}
		sh.mu.Unlock()
	}
	return total
}

// In a large pool most workers may get no traffic: the cap is shared among
// the workers that hold blocks, so the few in use keep whole prompts that
// an even share over every worker added would have cut.
func TestCapIsSharedByTheWorkersInUse(t *testing.T) {
	const maxBlocks, workers, used, promptBlocks = 128 << 10, 100, 4, 2000
	ix := New(WithMaxBlocks(maxBlocks))
	for id := range workers {
		ix.AddWorker(uint32(id) + 1)
	}
	prompts := make([][]uint64, used)
	for i := range prompts {
		prompts[i] = ix.Hashes(nil, "m", "", [][]byte{text(byte('a'+i), promptBlocks*BlockSize)})
	}
	for range 3 {
		for i, hs := range prompts {
			ix.Insert(uint32(i)+1, hugeCapacity, hs)
		}
	}
	for i, hs := range prompts {
		var s Scratch
		if got := ix.Match(hs, &s); len(got) != 1 || got[0].Blocks != promptBlocks {
			t.Errorf("prompt %d: match %v, want all %d blocks on worker %d", i, got, promptBlocks, i+1)
		}
	}
	// Once every worker is in use the cap still holds, and the last to
	// join gets room for its share at once, however unevenly its prompt's
	// 32 groups fall over the 16 shards.
	var last []uint64
	for id := range workers {
		last = ix.Hashes(nil, "later", "", [][]byte{text(byte(id), promptBlocks*BlockSize)})
		ix.Insert(uint32(id)+1, hugeCapacity, last)
		if st := ix.Stats(); st.Entries > maxBlocks {
			t.Fatalf("worker %d: %d entries, cap %d", id+1, st.Entries, maxBlocks)
		}
	}
	var s Scratch
	if got, share := ix.Match(last, &s), maxBlocks/workers; len(got) != 1 || got[0].Blocks < share*9/10 {
		t.Errorf("the last worker to join matches %v of its prompt, fair share %d", got, share)
	}
}
