package kvindex

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/kvevents"
)

// TestCopiesOfABlockAreEvictedOneByOne: vLLM does not de-duplicate its
// cache. Requests that fill the same block at once (the same prompt
// prefilled side by side, identical greedy outputs) each keep a copy under
// the same hash, and each copy's store and eviction is an event of its
// own; the server serves prefix hits from the block until its last copy
// goes. A block stored again from an offloaded copy is one copy on the GPU.
// Past the count's bound the block is held until the engine is cleared.
func TestCopiesOfABlockAreEvictedOneByOne(t *testing.T) {
	a := prompt(1, 4, -1)
	gpu := stored(1, a, 0, 4, "")
	evict := removed(gpu.Hashes...)
	copied := kvevents.Event{Kind: kvevents.BlockStored, Hashes: gpu.Hashes, Medium: "CPU"}
	times := func(n int, ev kvevents.Event) []kvevents.Event { return slices.Repeat([]kvevents.Event{ev}, n) }
	saturated := int(copyBits>>copyShift) + 2 // stores past the count's bound
	cases := map[string]struct {
		events [][]kvevents.Event
		want   []Hold
	}{
		"two copies, one evicted": {
			events: [][]kvevents.Event{times(2, gpu), {evict}},
			want:   []Hold{{Worker: 1, Blocks: 4, Prompt: 4}},
		},
		"two copies, both evicted": {
			events: [][]kvevents.Event{times(2, gpu), times(2, evict)},
		},
		"three copies, two evicted in one batch": {
			events: [][]kvevents.Event{{gpu}, times(2, gpu), times(2, evict)},
			want:   []Hold{{Worker: 1, Blocks: 4, Prompt: 4}},
		},
		"back on the GPU from an offloaded copy, then evicted from it": {
			events: [][]kvevents.Event{{gpu, copied, evict}, {gpu, evict}},
			want:   []Hold{{Worker: 1, Blocks: 4, Offloaded: 4, Prompt: 4}},
		},
		"copies past the count's bound, each evicted": {
			events: [][]kvevents.Event{times(saturated, gpu), times(saturated, evict)},
			want:   []Hold{{Worker: 1, Blocks: 4, Prompt: 4}},
		},
		"copies past the count's bound, then a clear": {
			events: [][]kvevents.Event{times(saturated, gpu), {{Kind: kvevents.AllBlocksCleared}}, {gpu, evict}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ix := New(0)
			for _, batch := range tc.events {
				ix.Apply(1, batch)
			}
			got := ix.Lookup(a, "", "", nil)
			if len(got) == 0 {
				got = nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("holds (-want +got):\n%s", diff)
			}
			checkHolders(t, ix)
			checkAdapters(t, ix)
		})
	}
}
