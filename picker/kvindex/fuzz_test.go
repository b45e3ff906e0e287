package kvindex

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/kvevents"
)

func FuzzParseTokens(f *testing.F) {
	f.Add([]byte(`{"count":3,"max_model_len":8192,"tokens":[1,2,3],"token_strs":null}`))
	f.Add([]byte(`{"tokens":[]}`))
	f.Add([]byte(`{"tokens":[4294967295],"tokens":[7]}`))
	f.Add([]byte(`{"tokens":[-1]}`))
	f.Add([]byte(`{"tokens":null}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		buf := []uint32{9, 9, 9}
		got, err := ParseTokens(data, buf)
		if err != nil {
			if len(got) != 0 {
				t.Fatalf("error %v with %d tokens", err, len(got))
			}
			return
		}
		again, err := ParseTokens(data, nil)
		if err != nil || !cmp.Equal(got, again, cmp.Comparer(func(a, b []uint32) bool {
			return len(a) == len(b) && (len(a) == 0 || cmp.Equal(a, b))
		})) {
			t.Fatalf("parsing again: %v, %v != %v", err, again, got)
		}
	})
}

// FuzzIndex applies arbitrary events to two workers and checks the index's
// bookkeeping: every block key's holders are exactly the workers whose
// blocks map to it, every adapter name is numbered exactly while blocks
// are held under it, and a lookup never reports more blocks than the
// prompt has.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 0, 3, 2, 2})
	f.Add([]byte{0, 0, 0, 4, 0, 1, 4, 2, 1, 0, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		ix := New(8)
		tokens := prompt(1, 8, -1)
		for len(ops) >= 2 {
			op, arg := ops[0], ops[1]
			ops = ops[2:]
			id, e := uint32(op&1)+1, int(op>>7)*5 // worker 1 or 2, engine 0 or 5 (a node's engines need not start at 0)
			switch op >> 1 % 5 {
			case 0: // store blocks [from, from+n) of prompt p
				p, from := uint64(arg>>6), int(arg>>3&7)
				to := min(8, from+int(arg&7)+1)
				adapter := []string{"", "a", "b"}[(op>>1)/5%3]
				ev := stored(p, tokens, from, to, adapter)
				if p&1 == 1 && from == 0 { // a salted prompt's first run
					ev.Extra = []kvevents.ExtraKeys{kvevents.SaltKeys("s")}
				}
				ix.ApplyEngine(id, e, []kvevents.Event{ev})
			case 1:
				ix.ApplyEngine(id, e, []kvevents.Event{removed(uint64(arg>>6)*1000 + uint64(arg&7))})
			case 2:
				if e == 0 {
					ix.Clear(id)
				} else {
					ix.ClearEngine(id, e)
				}
			case 3:
				if e == 0 {
					ix.Remove(id)
				} else {
					ix.RemoveEngine(id, e)
				}
			case 4:
				ix.ApplyEngine(id, e, []kvevents.Event{{Kind: kvevents.AllBlocksCleared}})
			}
		}
		checkHolders(t, ix)
		checkAdapters(t, ix)
		for _, salt := range []string{"", "s"} {
			holds, blocks := ix.Lookup(tokens, "", salt, nil)
			for _, h := range holds {
				if h.Blocks > blocks {
					t.Fatalf("salt %q: hold %+v over the prompt's %d blocks", salt, h, blocks)
				}
			}
		}
	})
}

func checkHolders(t *testing.T, ix *Index) {
	t.Helper()
	want := map[uint64]map[src]int{}
	for id, es := range ix.workers {
		live := 0
		for e, w := range es {
			if w == nil {
				continue
			}
			live++
			s := src{id: id, engine: uint32(e)}
			for _, b := range w.keys {
				if want[b.key] == nil {
					want[b.key] = map[src]int{}
				}
				want[b.key][s]++
			}
			if len(w.keys) > ix.maxPerWorker {
				t.Fatalf("worker %d engine %d holds %d blocks, over its bound %d", id, e, len(w.keys), ix.maxPerWorker)
			}
		}
		if live == 0 {
			t.Fatalf("worker %d kept with no engine", id)
		}
	}
	got := map[uint64]map[src]int{}
	for k, hs := range ix.holders {
		got[k] = map[src]int{}
		if hs.first.n() == 0 {
			t.Fatalf("key %x kept with no holder first (%d more)", k, len(hs.others()))
		}
		if hs.more != nil && len(*hs.more) == 0 {
			t.Fatalf("key %x keeps an empty list of more holders", k)
		}
		for _, h := range append([]holder{hs.first}, hs.others()...) {
			if got[k][h.src()] != 0 || h.n() == 0 {
				t.Fatalf("engine %+v listed twice or with no block for key %x", h.src(), k)
			}
			got[k][h.src()] = int(h.n())
		}
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(src{})); diff != "" {
		t.Fatalf("holders (-from engines' blocks +index):\n%s", diff)
	}
}

// checkAdapters checks the adapter table against the blocks the engines
// hold: a name is numbered exactly while a block is held under it, with
// that many blocks, and a freed number has no name.
func checkAdapters(t *testing.T, ix *Index) {
	t.Helper()
	want := map[string]int{}
	for _, es := range ix.workers {
		for _, w := range es {
			if w == nil {
				continue
			}
			for _, b := range w.keys {
				if int(b.adapter) >= len(ix.adapters.names) {
					t.Fatalf("block held under adapter number %d, beyond the table's %d", b.adapter, len(ix.adapters.names))
				}
				want[ix.adapters.names[b.adapter]]++
			}
		}
	}
	got := map[string]int{}
	for name, id := range ix.adapters.ids {
		if ix.adapters.names[id] != name {
			t.Fatalf("adapter %q numbered %d, which names %q", name, id, ix.adapters.names[id])
		}
		got[name] = ix.adapters.blocks[id]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("blocks by adapter (-from engines' blocks +table):\n%s", diff)
	}
	if len(ix.adapters.ids)+len(ix.adapters.free) != len(ix.adapters.names) {
		t.Fatalf("%d names and %d free numbers of %d", len(ix.adapters.ids), len(ix.adapters.free), len(ix.adapters.names))
	}
	for _, id := range ix.adapters.free {
		if ix.adapters.names[id] != "" || ix.adapters.blocks[id] != 0 {
			t.Fatalf("free number %d names %q with %d blocks", id, ix.adapters.names[id], ix.adapters.blocks[id])
		}
	}
	for _, name := range []string{"", "a", "b"} {
		if ix.Adapter(name) != (want[name] > 0) {
			t.Fatalf("Adapter(%q) = %v with %d blocks held under it", name, ix.Adapter(name), want[name])
		}
	}
}
