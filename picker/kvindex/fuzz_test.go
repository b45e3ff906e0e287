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
// bookkeeping: every node an engine's table finds by its hash is in its
// key's chain and no other node is, every adapter name is numbered exactly
// while blocks are held under it, the block sizes are counted by engine,
// and a lookup never reports more blocks than the prompt has in the
// worker's block size.
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
			switch op >> 1 % 6 {
			case 0: // store blocks [from, from+n) of prompt p
				p, from := uint64(arg>>6), int(arg>>3&7)
				to := min(8, from+int(arg&7)+1)
				adapter := []string{"", "a", "b"}[(op>>1)/6%3]
				ev := stored(p, tokens, from, to, adapter)
				if p == 2 { // a server of twice the block size
					ev = storedSized(p, tokens, from/2, max(from/2+1, to/2), adapter, 2*bs)
				}
				if p&1 == 1 && from == 0 { // a salted prompt's first run
					ev.Extra = []kvevents.ExtraKeys{kvevents.SaltKeys("s")}
				}
				switch (op >> 1) / 18 {
				case 1: // a hybrid model's groups
					ev.Group, ev.HasGroup, ev.SpecKind = 0, true, "full_attention"
				case 2:
					ev.Group, ev.HasGroup, ev.SpecKind = 1, true, "sliding_window"
				case 3: // an offloading tier's copies: hashes alone
					ev = kvevents.Event{Kind: kvevents.BlockStored, Hashes: ev.Hashes, Medium: "CPU"}
				}
				ix.ApplyEngine(id, e, []kvevents.Event{ev})
			case 1:
				ev := removed(uint64(arg>>6)*1000 + uint64(arg&7))
				if arg&8 != 0 {
					ev.Medium = "CPU" // an offloaded copy's eviction
				}
				if arg&16 != 0 {
					ev.Group, ev.HasGroup = int64(arg>>5&1), true
				}
				ix.ApplyEngine(id, e, []kvevents.Event{ev})
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
			case 5: // move the arg-th live node, as compacting the slab does
				if ix.nodes.live > 0 {
					ix.move(liveNode(&ix.nodes, int(arg)%ix.nodes.live))
				}
			}
		}
		checkHolders(t, ix)
		checkAdapters(t, ix)
		for _, salt := range []string{"", "s"} {
			for _, h := range ix.Lookup(tokens, "", salt, nil) {
				if h.Blocks > h.Prompt || h.Prompt != len(tokens)/bs && h.Prompt != len(tokens)/(2*bs) {
					t.Fatalf("salt %q: hold %+v of a prompt of %d tokens", salt, h, len(tokens))
				}
			}
		}
	})
}

func checkHolders(t *testing.T, ix *Index) {
	t.Helper()
	// Every node an engine's table names is the engine's, found by its
	// hash; a worker's engines together keep within its bound.
	live := map[uint32]bool{}
	for id, es := range ix.workers {
		followed, held := 0, 0
		for e, w := range es {
			if w == nil {
				continue
			}
			followed++
			if w.src != (src{id: id, engine: uint32(e)}) || int(w.slot) >= len(ix.engines) || ix.engines[w.slot] != w {
				t.Fatalf("worker %d engine %d: named %+v in slot %d, which holds another", id, e, w.src, w.slot)
			}
			n, offloaded := 0, 0
			w.blocks.each(func(r uint32) {
				n++
				nd := ix.nodes.at(r)
				if offloadedOnly(nd) {
					offloaded++
				}
				if nd.eng != w.slot || live[r] || nd.adapter&copyBits != 0 && nd.adapter&inGPU == 0 {
					t.Fatalf("node %d (%+v) in the table of engine slot %d", r, *nd, w.slot)
				}
				if _, got := w.blocks.find(&ix.nodes, nd.hash); got != r {
					t.Fatalf("engine slot %d: hash %d finds node %d, want %d", w.slot, nd.hash, got, r)
				}
				live[r] = true
			})
			checkParts(t, &w.blocks)
			if n != w.blocks.n || offloaded != w.offloaded {
				t.Fatalf("engine slot %d: %d nodes, counted %d; %d held only offloaded, counted %d",
					w.slot, n, w.blocks.n, offloaded, w.offloaded)
			}
			held += n
		}
		if held > ix.maxPerWorker {
			t.Fatalf("worker %d: its engines hold %d blocks, over its bound of %d", id, held, ix.maxPerWorker)
		}
		if followed == 0 {
			t.Fatalf("worker %d kept with no engine", id)
		}
	}
	sizes := map[int]int{}
	for slot, w := range ix.engines {
		if w != nil && ix.workers[w.src.id][w.src.engine] != w {
			t.Fatalf("engine slot %d (%+v) is not its worker's", slot, w.src)
		}
		if w != nil && w.blockSize != 0 {
			sizes[w.blockSize]++
		} else if w != nil && w.blocks.n != 0 {
			t.Fatalf("engine slot %d holds %d blocks of no size", slot, w.blocks.n)
		}
	}
	counted := map[int]int{}
	for _, s := range ix.sizes {
		if _, twice := counted[s.tokens]; twice || s.engines <= 0 {
			t.Fatalf("block sizes %+v", ix.sizes)
		}
		counted[s.tokens] = s.engines
	}
	if diff := cmp.Diff(sizes, counted); diff != "" {
		t.Fatalf("engines by block size (-engines +counted):\n%s", diff)
	}
	if len(live) != ix.nodes.live {
		t.Fatalf("%d nodes in the engines' tables, %d handed out", len(live), ix.nodes.live)
	}
	checkSlab(t, &ix.nodes)
	// Every key's chain links, both ways, exactly the nodes of that key,
	// and every node is in its key's chain.
	checkParts(t, &ix.keys)
	chained, keys := 0, 0
	ix.keys.each(func(first uint32) {
		keys++
		key := ix.nodes.at(first).key
		if _, got := ix.keys.find(&ix.nodes, key); got != first {
			t.Fatalf("key %x finds node %d, want %d", key, got, first)
		}
		prev := uint32(0)
		for r := first; r != 0; r = ix.nodes.at(r).next {
			nd := ix.nodes.at(r)
			if !live[r] || nd.key != key || nd.prev != prev {
				t.Fatalf("node %d (%+v) in the chain of key %x after node %d", r, *nd, key, prev)
			}
			chained++
			prev = r
		}
	})
	if chained != len(live) || keys != ix.keys.n {
		t.Fatalf("%d nodes chained of %d, %d keys counted %d", chained, len(live), keys, ix.keys.n)
	}
}

// liveNode returns the number of the k-th node handed out.
func liveNode(s *slab, k int) uint32 {
	for i := uint32(1); ; i++ {
		if !s.isFree(i) {
			if k == 0 {
				return i
			}
			k--
		}
	}
}

// checkSlab checks each chunk's free list and count, and that the slab
// finds the lowest chunk with a free node.
func checkSlab(t *testing.T, s *slab) {
	t.Helper()
	total, lowest := 0, -1
	for c := range s.chunks {
		first := uint32(0)
		if c == 0 {
			first = 1
		}
		free := 0
		for i := s.meta[c].free; i != 0; i = s.at(i).next {
			if int(i>>chunkBits) != c || !s.isFree(i) || free >= chunkSize {
				t.Fatalf("chunk %d: free list reaches node %d (%+v)", c, i, *s.at(i))
			}
			free++
		}
		marked := 0
		for j := first; j < chunkSize; j++ {
			if s.isFree(uint32(c<<chunkBits) | j) {
				marked++
			}
		}
		live := int(chunkSize-first) - free
		if marked != free || live != int(s.meta[c].live) {
			t.Fatalf("chunk %d: %d free listed, %d marked, %d live counted %d", c, free, marked, live, s.meta[c].live)
		}
		if has := s.room[c/64]&(1<<(c%64)) != 0; has != (free > 0) {
			t.Fatalf("chunk %d: %d free, room bit %v", c, free, has)
		}
		if free > 0 && lowest < 0 {
			lowest = c
		}
		total += live
	}
	if total != s.live || len(s.room) != (len(s.chunks)+63)/64 {
		t.Fatalf("%d live in the chunks, counted %d; %d room words for %d chunks", total, s.live, len(s.room), len(s.chunks))
	}
	if got := s.lowest(); got != lowest {
		t.Fatalf("lowest chunk with room %d, want %d", got, lowest)
	}
}

// checkAdapters checks the adapter table against the blocks the engines
// hold: a name is numbered exactly while a block is held under it, with
// that many blocks, and a freed number has no name.
func checkAdapters(t *testing.T, ix *Index) {
	t.Helper()
	want := map[string]int{}
	for _, w := range ix.engines {
		if w == nil {
			continue
		}
		w.blocks.each(func(r uint32) {
			a := ix.nodes.at(r).adapter
			if a&(inGPU|tierBits) == 0 {
				t.Fatalf("node %d held in no tier", r)
			}
			if a &= adapterBits; int(a) >= len(ix.adapters.names) {
				t.Fatalf("block held under adapter number %d, beyond the table's %d", a, len(ix.adapters.names))
			} else {
				want[ix.adapters.names[a]]++
			}
		})
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

// checkParts checks that each part of the table counts its nodes and is
// at most three quarters full and, past minShrink slots, at least an
// eighth.
func checkParts(t *testing.T, tb *table) {
	t.Helper()
	total := 0
	for i := range tb.parts {
		p := &tb.parts[i]
		n := 0
		for _, r := range p.slots {
			if r != 0 {
				n++
			}
		}
		if n != p.n || n*4 > len(p.slots)*3 || (len(p.slots) > minShrink && n*8 < len(p.slots)) {
			t.Fatalf("part %d: %d nodes in %d slots, counted %d", i, n, len(p.slots), p.n)
		}
		total += n
	}
	if total != tb.n {
		t.Fatalf("%d nodes in the parts, counted %d", total, tb.n)
	}
}

// FuzzTable inserts and removes arbitrary words in a table of few parts,
// enough for its parts to double and halve, and checks it against a map:
// every word present is found at its node and no other is, and each part
// keeps its count and load.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 128, 129, 130, 131})
	f.Fuzz(func(t *testing.T, ops []byte) {
		var s slab
		tb := newTable(2, false)
		want := map[uint64]uint32{}
		for i, op := range ops {
			w := uint64(op&0x7f) * 0x9e37 // 128 words
			if op&0x80 == 0 {
				// Insert the word, or, when present, a run of the next ones.
				for k := uint64(0); k < 1+uint64(i%7)*8; k++ {
					w := w + k*0x10001
					if _, ok := want[w]; ok {
						continue
					}
					r := s.alloc()
					*s.at(r) = node{hash: w}
					tb.insert(&s, r)
					want[w] = r
				}
				continue
			}
			for w2, r := range want { // remove this word and every other one with its parity
				if w2 != w && w2&1 != w&1 {
					continue
				}
				at, got := tb.find(&s, w2)
				if got != r {
					t.Fatalf("word %d found at node %d, want %d", w2, got, r)
				}
				tb.remove(&s, at)
				s.release(r)
				delete(want, w2)
			}
		}
		checkParts(t, &tb)
		checkSlab(t, &s)
		if tb.n != len(want) {
			t.Fatalf("table counts %d words, want %d", tb.n, len(want))
		}
		for w, r := range want {
			if _, got := tb.find(&s, w); got != r {
				t.Fatalf("word %d found at node %d, want %d", w, got, r)
			}
		}
		for op := range 256 {
			w := uint64(op) * 0x7f4a
			if _, ok := want[w]; !ok {
				if _, got := tb.find(&s, w); got != 0 {
					t.Fatalf("absent word %d found at node %d", w, got)
				}
			}
		}
	})
}
