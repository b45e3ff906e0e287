package kvindex

import (
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/kvevents"
	"github.com/inferpick/inferpick/picker/policy"
)

// TestServersOfDifferentBlockSizes: each engine's blocks are indexed in its
// server's own block size, so a pool rolled to another --block-size, or
// serving two models of different sizes, is indexed at once, and a prompt
// is looked up in blocks of every size stored. An engine's size is kept
// until it is cleared; a stored event of another size before then is
// malformed.
func TestServersOfDifferentBlockSizes(t *testing.T) {
	a := prompt(1, 4, -1) // 4 blocks of bs tokens, 2 of 2*bs
	type step struct {
		worker uint32
		events []kvevents.Event
		remove bool // the worker leaves
	}
	cases := map[string]struct {
		steps     []step
		want      []Hold
		malformed int64
	}{
		"a rollout to another block size": {
			steps: []step{
				{worker: 1, events: []kvevents.Event{stored(1, a, 0, 4, "")}},
				{worker: 1, remove: true},
				{worker: 2, events: []kvevents.Event{storedSized(2, a, 0, 2, "", 2*bs)}},
			},
			want: []Hold{{Worker: 2, Blocks: 2, Prompt: 2}},
		},
		"two block sizes in one pool": {
			steps: []step{
				{worker: 1, events: []kvevents.Event{stored(1, a, 0, 3, "")}},
				{worker: 2, events: []kvevents.Event{storedSized(2, a, 0, 1, "", 2*bs)}},
			},
			want: []Hold{{Worker: 1, Blocks: 3, Prompt: 4}, {Worker: 2, Blocks: 1, Prompt: 2}},
		},
		"the same tokens in blocks of either size are different blocks": {
			steps: []step{
				{worker: 1, events: []kvevents.Event{stored(1, a, 0, 4, "")}},
				{worker: 1, events: []kvevents.Event{storedSized(2, a, 0, 2, "", 2*bs)}},
			},
			want:      []Hold{{Worker: 1, Blocks: 4, Prompt: 4}},
			malformed: 1,
		},
		"a cleared engine takes the size of its next events": {
			steps: []step{
				{worker: 1, events: []kvevents.Event{stored(1, a, 0, 4, ""), {Kind: kvevents.AllBlocksCleared}}},
				{worker: 1, events: []kvevents.Event{storedSized(2, a, 0, 2, "", 2*bs)}},
			},
			want: []Hold{{Worker: 1, Blocks: 2, Prompt: 2}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ix := New(0)
			for _, s := range tc.steps {
				if s.remove {
					ix.Remove(s.worker)
				} else {
					ix.Apply(s.worker, s.events)
				}
			}
			if diff := cmp.Diff(tc.want, sorted(ix.Lookup(a, "", "", nil))); diff != "" {
				t.Errorf("holds (-want +got):\n%s", diff)
			}
			if _, d := ix.Stats(); d.Malformed != tc.malformed {
				t.Errorf("dropped %+v, want %d malformed", d, tc.malformed)
			}
			checkHolders(t, ix)
		})
	}
}

// TestLocatorSharesInEachPodsBlockSize: a pod's share of a prompt is what
// it holds of the prompt's blocks in its own block size.
func TestLocatorSharesInEachPodsBlockSize(t *testing.T) {
	tokens := prompt(1, 4, -1)
	reg, w1, w2 := twoTokenizingWorkers(t, tokens)
	ix := New(0)
	ix.Apply(w1.ID(), []kvevents.Event{stored(1, tokens, 0, 2, "")})
	ix.Apply(w2.ID(), []kvevents.Event{storedSized(2, tokens, 0, 1, "", 2*bs)})
	l := NewLocator(ix, reg, time.Second)
	var sh policy.Shared
	if found, err := l.Locate(t.Context(), "m", chat(t), &sh); err != nil || !found {
		t.Fatalf("found %v, %v", found, err)
	}
	want := []policy.SharedHold{{Worker: w1.ID(), Share: 0.5}, {Worker: w2.ID(), Share: 0.5}}
	got := sh.Holds
	sort.Slice(got, func(i, j int) bool { return got[i].Worker < got[j].Worker })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("holds (-want +got):\n%s", diff)
	}
}
