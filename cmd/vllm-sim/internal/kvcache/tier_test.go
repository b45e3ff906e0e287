package kvcache

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// notes records what an observer is told, in order: a run of stored
// blocks as its hashes, a removed block h as {0, h}.
type notes struct{ got [][]uint64 }

func (n *notes) Stored(hashes []uint64, from, to int) {
	n.got = append(n.got, slices.Clone(hashes[from:to]))
}

func (n *notes) Removed(h uint64) { n.got = append(n.got, []uint64{0, h}) }

// gone is how notes writes the removal of h.
func gone(h uint64) []uint64 { return []uint64{0, h} }

// The tier keeps what was stored or used most recently; storing blocks it
// holds uses them again and tells nobody, and it reports the runs it put in.
func TestTierEvictsTheLeastRecentlyStored(t *testing.T) {
	tier := NewTier(4)
	var n notes
	tier.SetObserver(&n)
	tier.Store([]uint64{1, 2, 3})
	tier.Store([]uint64{1, 4}) // 1 used again: 2 is now the oldest
	tier.Store([]uint64{5, 6})
	want := [][]uint64{{1, 2, 3}, {4}, gone(2), gone(3), {5, 6}}
	if diff := cmp.Diff(want, n.got); diff != "" {
		t.Errorf("notifications (-want +got):\n%s", diff)
	}
	for _, tc := range []struct {
		hashes []uint64
		want   int
	}{
		{[]uint64{1, 4, 5, 6}, 4},
		{[]uint64{1, 2, 4}, 1}, // a leading run only
		{[]uint64{2}, 0},
	} {
		if got := tier.Match(tc.hashes); got != tc.want {
			t.Errorf("Match(%v) = %d, want %d", tc.hashes, got, tc.want)
		}
	}
	if tier.Len() != 4 {
		t.Errorf("Len = %d, want 4", tier.Len())
	}
}

// A request longer than the tier keeps its leading blocks, and none of them
// is reported stored and removed by the same call.
func TestTierKeepsTheHeadOfALongRequest(t *testing.T) {
	tier := NewTier(3)
	var n notes
	tier.SetObserver(&n)
	tier.Store([]uint64{9})
	tier.Store([]uint64{1, 2, 3, 4, 5})
	want := [][]uint64{{9}, gone(9), {1, 2, 3}}
	if diff := cmp.Diff(want, n.got); diff != "" {
		t.Errorf("notifications (-want +got):\n%s", diff)
	}
	if got := tier.Match([]uint64{1, 2, 3, 4}); got != 3 {
		t.Errorf("Match of the request = %d, want its 3 leading blocks", got)
	}
	empty := NewTier(0)
	empty.Store([]uint64{1})
	if empty.Len() != 0 {
		t.Errorf("a tier of no blocks holds %d", empty.Len())
	}
}
