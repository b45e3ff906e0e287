package kvindex

import "math/bits"

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
	adapter uint32 // the number of the adapter it was stored under, and where it is (inGPU, copyBits, tierBits)
}

// The top bit of node.adapter tells whether the engine's server holds the
// block in its GPU cache. The bits below it count the copies the GPU holds
// beyond the first: vLLM does not de-duplicate its cache, so requests that
// filled the same block at once each keep a copy under the same hash, and
// each copy is stored and evicted with an event of its own. The bits below
// those count the copies offloading tiers hold (copies vLLM's KV offloading
// made before the GPU evicted the block): one for each tier, and for each
// chunk of a tier, that announced one and has not dropped it. A count
// saturated (all its bits set) is no longer changed. The low bits are the
// adapter's number.
const (
	inGPU       = 1 << 31
	copyShift   = 25
	oneCopy     = 1 << copyShift
	copyBits    = inGPU - oneCopy // all set: the count saturated
	tierShift   = 20
	oneTier     = 1 << tierShift
	tierBits    = oneCopy - oneTier // all set: the count saturated
	adapterBits = oneTier - 1
)

const (
	chunkBits = 9
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

// freeEng marks a free node in place of an engine's slot.
const freeEng = ^uint32(0)

// slab hands out nodes by number from chunks that do not move while they
// are kept, so a node's address stays valid while the slab grows. It hands
// out the lowest chunk's free nodes first, so that as blocks come and go
// the nodes gather in the low chunks and the top ones empty (Index.compact
// moves the last of them down and lets the top chunk go). Number 0 is never
// handed out: it means none.
type slab struct {
	chunks []*[chunkSize]node
	meta   []chunkMeta // by chunk
	room   []uint64    // bit c: chunk c has a free node
	low    int         // no word of room below this one has a bit set
	live   int
}

// chunkMeta is a chunk's free list and count, kept apart from its nodes so
// that a chunk is exactly a size class (16 KiB).
type chunkMeta struct {
	free uint32 // the chunk's first free node, 0: none
	live int32
}

func (s *slab) at(i uint32) *node { return &s.chunks[i>>chunkBits][i&chunkMask] }

// isFree reports whether node i is free.
func (s *slab) isFree(i uint32) bool { return s.at(i).eng == freeEng }

func (s *slab) alloc() uint32 {
	c := s.lowest()
	if c < 0 {
		c = s.add()
	}
	m := &s.meta[c]
	i := m.free
	m.free = s.at(i).next
	if m.free == 0 {
		s.room[c/64] &^= 1 << (c % 64)
	}
	m.live++
	s.live++
	return i
}

func (s *slab) release(i uint32) {
	c := int(i >> chunkBits)
	m := &s.meta[c]
	*s.at(i) = node{next: m.free, eng: freeEng}
	m.free = i
	m.live--
	s.live--
	s.room[c/64] |= 1 << (c % 64)
	s.low = min(s.low, c/64)
}

// lowest returns the lowest chunk with a free node, -1 when none has.
func (s *slab) lowest() int {
	for ; s.low < len(s.room); s.low++ {
		if w := s.room[s.low]; w != 0 {
			return s.low*64 + bits.TrailingZeros64(w)
		}
	}
	return -1
}

// add appends a chunk of free nodes, the lowest first in its free list, and
// returns its number.
func (s *slab) add() int {
	c := len(s.chunks)
	ch := new([chunkSize]node)
	next := uint32(0)
	for j := chunkSize - 1; j >= 0; j-- {
		if c == 0 && j == 0 {
			break // number 0 means none
		}
		ch[j] = node{next: next, eng: freeEng}
		next = uint32(c<<chunkBits | j)
	}
	s.chunks = append(s.chunks, ch)
	s.meta = append(s.meta, chunkMeta{free: next})
	if c/64 == len(s.room) {
		s.room = append(s.room, 0)
	}
	s.room[c/64] |= 1 << (c % 64)
	s.low = min(s.low, c/64)
	return c
}

// dropTop lets the top chunk, whose nodes are all free, go.
func (s *slab) dropTop() {
	c := len(s.chunks) - 1
	s.chunks[c] = nil
	s.chunks, s.meta = s.chunks[:c], s.meta[:c]
	s.room[c/64] &^= 1 << (c % 64)
	if c%64 == 0 {
		s.room = s.room[:c/64]
	}
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

// newTable returns a table of 2^partBits parts.
func newTable(partBits uint8, byKey bool) table {
	return table{parts: make([]part, 1<<partBits), bits: partBits, byKey: byKey}
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
