package kvindex

// The index keeps its blocks as nodes in one slab, found through two
// open-addressed tables of node numbers: each engine's, by the server's
// hash of a block (for removals and parents), and one for every engine, by
// the index's key of a block, naming the first node of the key's chain (the
// engines holding it). A block an engine holds costs its 32-byte node and a
// 4-byte slot in each table, at most three quarters full: about 40 to 53
// bytes (BenchmarkEventIndexMemory).

// node is a block one engine holds under one of its server's hashes.
type node struct {
	hash    uint64 // the server's hash of the block
	key     uint64 // the index's key of the block
	prev    uint32 // the node before this one in its key's chain; 0: none, this is the first
	next    uint32 // the node after it in its key's chain, or, when free, the next free node
	eng     uint32 // the engine holding the block: its slot in Index.engines
	adapter uint32 // the number of the adapter it was stored under
}

const (
	chunkBits = 9
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

// slab hands out nodes by number from chunks that never move, so a node's
// address stays valid while the slab grows. Number 0 is never handed out:
// it means none.
type slab struct {
	chunks []*[chunkSize]node
	used   uint32 // numbers handed out at least once, counting 0
	free   uint32 // the first free node, 0: none
	live   int
}

func (s *slab) at(i uint32) *node { return &s.chunks[i>>chunkBits][i&chunkMask] }

func (s *slab) alloc() uint32 {
	s.live++
	if i := s.free; i != 0 {
		s.free = s.at(i).next
		return i
	}
	if s.used == 0 {
		s.used = 1
	}
	i := s.used
	if int(i>>chunkBits) == len(s.chunks) {
		s.chunks = append(s.chunks, new([chunkSize]node))
	}
	s.used++
	return i
}

func (s *slab) release(i uint32) {
	s.live--
	*s.at(i) = node{next: s.free}
	s.free = i
}

// table is an open-addressed table of node numbers, each found by its
// node's hash or, with byKey, its node's key. It is split in parts by the
// top bits of a multiplicative hash of that word, each part a power of two
// of slots (0: empty) at most three quarters full, probed linearly from the
// hash's next bits; a part doubles on its own, so growing rehashes a part's
// nodes, not the table's, and halves once under an eighth full (from 128
// slots up). A removal
// shifts the slots after it back, so no tombstones are left.
type table struct {
	parts []part
	bits  uint8 // log2(len(parts))
	n     int
	byKey bool
}

type part struct {
	slots []uint32
	shift uint8 // 64 - log2(len(slots))
	n     int
}

// spot is a slot of a table: the part and the index in it.
type spot struct {
	p *part
	i int
}

func newTable(bits uint8, byKey bool) table {
	return table{parts: make([]part, 1<<bits), bits: bits, byKey: byKey}
}

func (t *table) word(s *slab, r uint32) uint64 {
	if t.byKey {
		return s.at(r).key
	}
	return s.at(r).hash
}

// locate returns the part of hash h = word × m0, and where in it h's
// probe starts.
func (t *table) locate(h uint64) (*part, int) {
	p := &t.parts[h>>(64-t.bits)] // 0 when bits is 0: a shift by 64 clears every bit
	return p, int(h << t.bits >> p.shift)
}

// find returns the number of the node whose word is w, and its slot; 0
// when there is none.
func (t *table) find(s *slab, w uint64) (spot, uint32) {
	p, i := t.locate(w * m0)
	if p.n == 0 {
		return spot{}, 0
	}
	mask := len(p.slots) - 1
	for ; ; i = (i + 1) & mask {
		r := p.slots[i]
		if r == 0 {
			return spot{}, 0
		}
		if t.word(s, r) == w {
			return spot{p, i}, r
		}
	}
}

// insert adds node r, whose word no node in the table has.
func (t *table) insert(s *slab, r uint32) {
	h := t.word(s, r) * m0
	p, _ := t.locate(h)
	if (p.n+1)*4 > len(p.slots)*3 {
		t.grow(s, p)
	}
	t.place(s, p, r)
	p.n++
	t.n++
}

func (t *table) place(s *slab, p *part, r uint32) {
	_, i := t.locate(t.word(s, r) * m0)
	mask := len(p.slots) - 1
	for p.slots[i] != 0 {
		i = (i + 1) & mask
	}
	p.slots[i] = r
}

func (t *table) grow(s *slab, p *part) { t.resize(s, p, max(2*len(p.slots), 8)) }

// resize moves the part's nodes to size slots.
func (t *table) resize(s *slab, p *part, size int) {
	old := p.slots
	p.slots = make([]uint32, size)
	p.shift = uint8(64 - log2(size))
	for _, r := range old {
		if r != 0 {
			t.place(s, p, r)
		}
	}
}

// minShrink is the fewest slots a part halves from: below it a part that
// empties and fills again, as a small cache's does at every prefill step,
// would be reallocated each time.
const minShrink = 64

// set puts node r in slot at, in place of the node there.
func (t *table) set(at spot, r uint32) { at.p.slots[at.i] = r }

// remove empties slot at, moving back each slot after it that its probe's
// start allows, up to the next empty one.
func (t *table) remove(s *slab, at spot) {
	p := at.p
	mask := len(p.slots) - 1
	i := at.i
	for j := (i + 1) & mask; p.slots[j] != 0; j = (j + 1) & mask {
		_, h := t.locate(t.word(s, p.slots[j]) * m0)
		// The slot at j may move to i unless its start lies in (i, j],
		// cyclically.
		if (i < j && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			p.slots[i] = p.slots[j]
			i = j
		}
	}
	p.slots[i] = 0
	p.n--
	t.n--
	if len(p.slots) > minShrink && p.n*8 < len(p.slots) {
		t.resize(s, p, len(p.slots)/2)
	}
}

// each calls f with every node in the table.
func (t *table) each(f func(r uint32)) {
	for pi := range t.parts {
		for _, r := range t.parts[pi].slots {
			if r != 0 {
				f(r)
			}
		}
	}
}

// reset empties the table and lets its slots go: an engine cleared is
// filled again from its events, growing back only as far as they take it.
func (t *table) reset() {
	for pi := range t.parts {
		t.parts[pi] = part{}
	}
	t.n = 0
}

func log2(n int) int {
	l := 0
	for 1<<l < n {
		l++
	}
	return l
}
