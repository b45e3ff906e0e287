package kvindex

import "testing"

// Three engines hold one key, the first of them twice: removing the first
// one's blocks moves another into its place, and the key is empty only
// once every block of every engine is gone.
func TestHoldersCountEachEngineOnce(t *testing.T) {
	a, b, c := src{id: 1}, src{id: 2}, src{id: 2, engine: MaxEngines - 1}
	var hs holders
	for _, id := range []src{a, b, a, c} {
		hs.add(id)
	}
	if hs.first.src() != a || hs.first.n() != 2 || len(hs.others()) != 2 {
		t.Fatalf("after a, b, a, c: %+v, want a twice first, then b and c", hs)
	}
	steps := []struct {
		remove     src
		empty      bool
		has, hasnt []src
	}{
		{remove: a, has: []src{a, b, c}},
		{remove: a, has: []src{b, c}, hasnt: []src{a}},
		{remove: a, has: []src{b, c}, hasnt: []src{a}}, // not a holder: nothing changes
		{remove: b, has: []src{c}, hasnt: []src{a, b}},
		{remove: c, empty: true, hasnt: []src{a, b, c}},
	}
	for i, s := range steps {
		if empty := hs.remove(s.remove); empty != s.empty {
			t.Fatalf("step %d: remove %+v reported empty %v, want %v (%+v)", i, s.remove, empty, s.empty, hs)
		}
		for _, id := range s.has {
			if !hs.has(id) {
				t.Errorf("step %d: %+v not held, want held (%+v)", i, id, hs)
			}
		}
		for _, id := range s.hasnt {
			if hs.has(id) {
				t.Errorf("step %d: %+v held, want not (%+v)", i, id, hs)
			}
		}
	}
}
