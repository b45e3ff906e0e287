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

// FuzzIndex runs random operations against three indexes and references:
// one that never evicts, whose matches must equal the reference walk; one
// that evicts, whose per-worker LRU must equal the reference; and a sharded
// one remembering two holders per block, which must keep the invariants.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	f.Add([]byte{0x10, 0x11, 0x22, 0x31, 0x42, 0x13, 0x24, 0x05, 0x46, 0x37, 0x12, 0x23})
	f.Add([]byte("insert and match and remove workers all day long"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const small, large = 7, 1000
		exact := New(WithShards(1))
		lru := New(WithShards(1))
		sharded := New(WithShards(4), WithMaxHolders(2))
		refExact := &model{workers: map[uint32]map[uint64]int{}}
		refLRU := &model{workers: map[uint32]map[uint64]int{}}
		removed := map[uint32]bool{}
		// A handful of prompts that share prefixes of various lengths.
		prompts := make([][]uint64, 8)
		for i := range prompts {
			body := append(text('s', (i%3)*BlockSize), text(byte('a'+i), (i+1)*BlockSize)...)
			prompts[i] = exact.Hashes(nil, "m", "", [][]byte{body})
		}
		var scratch Scratch
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%4, ops[i+1]
			id := uint32(arg%6) + 1
			hs := prompts[arg>>5]
			switch op {
			case 0:
				if !removed[id] {
					for _, ix := range []*Index{exact, lru, sharded} {
						ix.AddWorker(id)
					}
					for _, ref := range []*model{refExact, refLRU} {
						if ref.workers[id] == nil {
							ref.workers[id] = map[uint64]int{}
						}
					}
				}
			case 1:
				for _, ix := range []*Index{exact, lru, sharded} {
					ix.RemoveWorker(id)
				}
				delete(refExact.workers, id)
				delete(refLRU.workers, id)
				removed[id] = true
			case 2:
				exact.Insert(id, large, hs)
				refExact.insert(id, large, hs)
				lru.Insert(id, small, hs)
				refLRU.insert(id, small, hs)
				sharded.Insert(id, small, hs)
			case 3:
				got := sorted(exact.Match(hs, &scratch))
				if diff := cmp.Diff(refExact.match(hs), got, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("op %d: match (-want +got):\n%s", i/2, diff)
				}
				for _, ix := range []*Index{lru, sharded} {
					for _, m := range ix.Match(hs, &scratch) {
						if removed[m.Worker] || m.Blocks > len(hs) || m.Blocks < 1 {
							t.Fatalf("op %d: match %+v (removed %v)", i/2, m, removed)
						}
					}
				}
			}
			for id := uint32(1); id <= 6; id++ {
				if n := lru.WorkerBlocks(id); n != len(refLRU.workers[id]) {
					t.Fatalf("op %d: worker %d holds %d blocks, want %d", i/2, id, n, len(refLRU.workers[id]))
				}
				if n := sharded.WorkerBlocks(id); n > sharded.Bound(small) || (removed[id] && n != 0) {
					t.Fatalf("op %d: sharded worker %d holds %d blocks, bound %d", i/2, id, n, sharded.Bound(small))
				}
			}
		}
		for name, c := range map[string]struct {
			ix  *Index
			ref *model
		}{"exact": {exact, refExact}, "lru": {lru, refLRU}} {
			st := c.ix.Stats()
			entries := 0
			distinct := map[uint64]bool{}
			for _, held := range c.ref.workers {
				entries += len(held)
				for h := range held {
					distinct[h] = true
				}
			}
			if st.Entries != entries || st.Blocks != len(distinct) {
				t.Fatalf("%s: stats %+v, want %d entries over %d blocks", name, st, entries, len(distinct))
			}
		}
	})
}
