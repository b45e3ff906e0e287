package kvindex

// The index keeps its blocks as nodes in one slab, found through two
// open-addressed tables of node numbers: each engine's, by the server's
// hash of a block (for removals and parents), and one for every engine, by
// the index's key of a block, naming the first node of the key's chain (the
// engines holding it). A block an engine holds costs its 32-byte node and a
// 4-byte slot in each table at most three quarters full: 40 to 48 bytes,
// where two Go maps took 68 to 107.

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

// refs is an open-addressed table of node numbers (0: an empty slot), each
// found by its node's hash or, with byKey, its node's key. Linear probing
// from a multiplicative hash of the word, at most three quarters full;
// a removal shifts the slots after it back, so no tombstones are left.
type refs struct {
	slots []uint32
	shift uint8 // 64 - log2(len(slots))
	n     int
	byKey bool
}

func (t *refs) word(s *slab, r uint32) uint64 {
	if t.byKey {
		return s.at(r).key
	}
	return s.at(r).hash
}

func (t *refs) home(w uint64) int { return int((w * m0) >> t.shift) }

// find returns the number of the node whose word is w, and the slot it is
// in; 0 when there is none.
func (t *refs) find(s *slab, w uint64) (pos int, r uint32) {
	if t.n == 0 {
		return -1, 0
	}
	mask := len(t.slots) - 1
	for i := t.home(w); ; i = (i + 1) & mask {
		r := t.slots[i]
		if r == 0 {
			return -1, 0
		}
		if t.word(s, r) == w {
			return i, r
		}
	}
}

// insert adds node r, whose word no node in the table has.
func (t *refs) insert(s *slab, r uint32) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.grow(s)
	}
	t.place(s, r)
	t.n++
}

func (t *refs) place(s *slab, r uint32) {
	mask := len(t.slots) - 1
	i := t.home(t.word(s, r))
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = r
}

func (t *refs) grow(s *slab) {
	old := t.slots
	size := max(2*len(old), 8)
	t.slots = make([]uint32, size)
	t.shift = uint8(64 - log2(size))
	for _, r := range old {
		if r != 0 {
			t.place(s, r)
		}
	}
}

// remove empties slot pos, moving back each slot after it that its home
// allows, up to the next empty one.
func (t *refs) remove(s *slab, pos int) {
	mask := len(t.slots) - 1
	i := pos
	for j := (i + 1) & mask; t.slots[j] != 0; j = (j + 1) & mask {
		h := t.home(t.word(s, t.slots[j]))
		// The slot at j may move to i unless its home lies in (i, j],
		// cyclically.
		if (i < j && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = 0
	t.n--
}

// reset empties the table, keeping its slots.
func (t *refs) reset() {
	clear(t.slots)
	t.n = 0
}

func log2(n int) int {
	l := 0
	for 1<<l < n {
		l++
	}
	return l
}
