package prefix

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A table keeps every entry reachable through growth and removals when
// probe runs are long: many
// hashes share a home, so entries sit past the displacement a slot can
// record and the removal reads their home from the node; and many hashes
// have several holders.
func TestTableLongProbeRuns(t *testing.T) {
	for name, homes := range map[string]uint64{"one home": 1, "two homes": 2, "spread": 1 << 20} {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(homes, 3))
			var s slab
			var tab table
			live := map[uint64][]uint32{} // hash → its nodes
			entries := 0
			add := func() {
				// The home bits (16–47) take one of homes values, the rest
				// of the hash is random; one hash in three is held already.
				// The table ignores the low 16 bits.
				h := rng.Uint64()&^(uint64(1<<32-1)<<16|keySlotMask) | rng.Uint64N(homes)<<16
				if rng.IntN(3) == 0 {
					for held := range live {
						h = held
						break
					}
				}
				tab.reserve(&s)
				idx := s.alloc()
				if held := tab.held(h, &s); held != (len(live[h]) > 0) {
					t.Fatalf("add %x: held %v, by %d nodes", h, held, len(live[h]))
				}
				tab.add(h, idx)
				s.at(idx).key = keyOf(h, uint32(len(live[h])))
				live[h] = append(live[h], idx)
				entries++
			}
			remove := func(step int) {
				for h, nodes := range live { // one at random
					k := rng.IntN(len(nodes))
					idx := nodes[k]
					pos := tab.locate(h, idx)
					if got := tab.slots[pos] & idxMask; got != idx {
						t.Fatalf("step %d: removing %x found node %d, want %d", step, h, got, idx)
					}
					if others := tab.remove(pos, h, true, &s); others != (len(nodes) > 1) {
						t.Fatalf("step %d: removing one of %d holders of %x: others %v", step, len(nodes), h, others)
					}
					s.release(idx)
					if live[h] = slices.Delete(nodes, k, k+1); len(live[h]) == 0 {
						delete(live, h)
					}
					entries--
					return
				}
			}
			for step := range 6000 {
				if entries < 300 || rng.IntN(2) == 0 {
					add()
				} else {
					remove(step)
				}
				for h, want := range live {
					var got []uint32
					c := tab.start(h)
					for idx := tab.scan(h, &c, &s); idx != 0; idx = tab.scan(h, &c, &s) {
						got = append(got, idx)
					}
					slices.Sort(got)
					if !slices.Equal(got, slices.Sorted(slices.Values(want))) {
						t.Fatalf("step %d: %x held by %v, want %v", step, h, got, want)
					}
				}
				if tab.count != entries {
					t.Fatalf("step %d: table counts %d entries, holds %d", step, tab.count, entries)
				}
				if used := float64(tab.count) / float64(len(tab.slots)); used > 0.75 {
					t.Fatalf("step %d: %d of %d slots used", step, tab.count, len(tab.slots))
				}
			}
		})
	}
}
