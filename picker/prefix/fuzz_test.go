package prefix

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// model is a plain reference of the index with one shard: each worker's
// blocks with the tick they were last used at.
type model struct {
	tick    int
	workers map[uint32]map[uint64]int
}

func (m *model) insert(id uint32, capacity int, hs []uint64) {
	held, ok := m.workers[id]
	if !ok {
		return
	}
	for _, h := range slices.Backward(hs) {
		m.tick++
		held[h] = m.tick
		for len(held) > capacity {
			oldest, at := uint64(0), -1
			for k, t := range held {
				if at < 0 || t < at {
					oldest, at = k, t
				}
			}
			delete(held, oldest)
		}
	}
}

func (m *model) match(hs []uint64) []Match {
	var out []Match
	for id, held := range m.workers {
		n := 0
		for n < len(hs) {
			if _, ok := held[hs[n]]; !ok {
				break
			}
			n++
		}
		if n > 0 {
			out = append(out, Match{Worker: id, Blocks: n})
		}
	}
	return sorted(out)
}

// FuzzIndex runs random operations against an exact one-shard index and its
// reference, and against a sharded index whose bound is looser and whose
// blocks remember two holders.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0x10, 0x11, 0x22, 0x31, 0x42, 0x13, 0x24, 0x05, 0x46, 0x37, 0x12, 0x23})
	f.Add([]byte("insert and match and remove workers all day long"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const capacity = 7
		exact := New(WithShards(1))
		sharded := New(WithShards(4), WithMaxHolders(2))
		ref := &model{workers: map[uint32]map[uint64]int{}}
		removed := map[uint32]bool{}
		// A handful of prompts that share prefixes of various lengths.
		prompts := make([][]uint64, 8)
		for i := range prompts {
			body := append(text('s', (i%3)*BlockSize), text(byte('a'+i), (i+1)*BlockSize)...)
			prompts[i] = exact.Hashes(nil, "m", "", [][]byte{body})
		}
		var s1, s2 Scratch
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%4, ops[i+1]
			id := uint32(arg%6) + 1
			switch op {
			case 0:
				if !removed[id] {
					exact.AddWorker(id)
					sharded.AddWorker(id)
					if ref.workers[id] == nil {
						ref.workers[id] = map[uint64]int{}
					}
				}
			case 1:
				exact.RemoveWorker(id)
				sharded.RemoveWorker(id)
				delete(ref.workers, id)
				removed[id] = true
			case 2:
				hs := prompts[arg>>5]
				exact.Insert(id, capacity, hs)
				sharded.Insert(id, capacity, hs)
				ref.insert(id, capacity, hs)
			case 3:
				hs := prompts[arg>>5]
				got := sorted(exact.Match(hs, &s1))
				if diff := cmp.Diff(ref.match(hs), got, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("op %d: match (-want +got):\n%s", i/2, diff)
				}
				ms := sharded.Match(hs, &s2)
				if len(ms) > 2 {
					t.Fatalf("op %d: %d workers hold a block remembering at most 2", i/2, len(ms))
				}
				for _, m := range ms {
					if removed[m.Worker] || m.Blocks > len(hs) || m.Blocks < 1 {
						t.Fatalf("op %d: sharded match %+v (removed %v)", i/2, m, removed)
					}
				}
			}
			for id := uint32(1); id <= 6; id++ {
				if n := exact.WorkerBlocks(id); n != len(ref.workers[id]) {
					t.Fatalf("op %d: worker %d holds %d blocks, want %d", i/2, id, n, len(ref.workers[id]))
				}
				if n := sharded.WorkerBlocks(id); n > sharded.Bound(capacity) || (removed[id] && n != 0) {
					t.Fatalf("op %d: sharded worker %d holds %d blocks, bound %d", i/2, id, n, sharded.Bound(capacity))
				}
			}
		}
		st := exact.Stats()
		entries := 0
		distinct := map[uint64]bool{}
		for _, held := range ref.workers {
			entries += len(held)
			for h := range held {
				distinct[h] = true
			}
		}
		if st.Entries != entries || st.Blocks != len(distinct) {
			t.Fatalf("stats %+v, want %d entries over %d blocks", st, entries, len(distinct))
		}
	})
}
