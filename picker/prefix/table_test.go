package prefix

import (
	"math/rand/v2"
	"testing"
)

// A table keeps every entry reachable through removals when probe runs are
// long: many hashes share a home, so entries sit past the displacement a
// slot can record and the removal reads their home from the node.
func TestTableLongProbeRuns(t *testing.T) {
	for name, homes := range map[string]uint64{"one home": 1, "two homes": 2, "spread": 1 << 20} {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(homes, 3))
			var s slab
			var tab table
			live := map[uint64]uint32{}
			add := func() {
				// The home bits (17 and up) take one of homes values, the
				// rest of the hash is random.
				h := rng.Uint64()&^(uint64(1<<30-1)<<17) | rng.Uint64N(homes)<<17
				if _, ok := live[h]; ok {
					return
				}
				pos, idx := tab.find(h, 0, &s)
				if idx != 0 {
					t.Fatalf("absent hash %x found at node %d", h, idx)
				}
				idx = s.alloc()
				s.at(idx).hash = h
				tab.insert(pos, idx, &s)
				live[h] = idx
			}
			for step := range 4000 {
				if len(live) < 40 || rng.IntN(2) == 0 {
					add()
					continue
				}
				for h, idx := range live { // one at random
					pos, got := tab.find(h, idx, &s)
					if got != idx {
						t.Fatalf("step %d: removing %x found node %d, want %d", step, h, got, idx)
					}
					tab.remove(pos, &s)
					s.release(idx)
					delete(live, h)
					break
				}
				for h, idx := range live {
					if _, got := tab.find(h, 0, &s); got != idx {
						t.Fatalf("step %d: %x found at node %d, want %d", step, h, got, idx)
					}
				}
				if tab.count != len(live) {
					t.Fatalf("step %d: table counts %d entries, holds %d", step, tab.count, len(live))
				}
			}
		})
	}
}
