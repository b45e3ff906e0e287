package prefix

// node is one (block, worker) pair: the worker holds the block. Nodes live in
// a shard's slab and are named by uint32 indices; index 0 is "none".
type node struct {
	hash uint64
	slot uint16 // the worker's slot in the index
	// tick is the worker's insert tick (see Index.Insert) when the node was
	// last touched, modulo 2^16: the age of a list's tail orders eviction
	// across shards.
	tick uint16
	prev uint32 // more recently used node of the same worker and shard
	next uint32 // less recently used node; the free-list link when free
	same uint32 // next holder of the same block
}

const (
	chunkBits = 8
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1
)

// slab allocates nodes in fixed-size chunks, so growing never copies and the
// slack is at most one chunk.
type slab struct {
	chunks []*[chunkSize]node
	next   uint32 // first never-used index
	free   uint32 // head of the free list
	live   int
}

func (s *slab) at(i uint32) *node { return &s.chunks[i>>chunkBits][i&chunkMask] }

func (s *slab) alloc() uint32 {
	s.live++
	if i := s.free; i != 0 {
		s.free = s.at(i).next
		return i
	}
	if s.next == 0 {
		s.next = 1 // index 0 stays unused
	}
	i := s.next
	if int(i>>chunkBits) == len(s.chunks) {
		s.chunks = append(s.chunks, new([chunkSize]node))
	}
	s.next++
	return i
}

func (s *slab) release(i uint32) {
	s.live--
	*s.at(i) = node{next: s.free}
	s.free = i
}

// maxNodes bounds a shard's nodes: a node index takes the low 24 bits of a
// table slot, the high 8 bits being a tag of the hash.
const maxNodes = 1<<24 - 1

func (s *slab) full() bool { return s.free == 0 && s.next >= maxNodes }

// table maps a block hash to the first node holding it: open addressing
// with linear probing. A slot holds a node index and an 8-bit tag of the
// hash, so a probe reads a node (the key) only when the tag agrees: four
// bytes per slot, and about one memory access per lookup beyond the slots.
// Deletion shifts entries back, so there are no tombstones.
type table struct {
	slots []uint32 // tag<<24 | node index; 0 is empty
	count int
}

const (
	minTableSize = 64
	idxMask      = 1<<24 - 1
)

func tag(h uint64) uint32 { return uint32(h>>56) << 24 }

func (t *table) home(h uint64) int { return int((h >> 17) & uint64(len(t.slots)-1)) }

// find returns the slot position for h and the node index stored there, 0
// when h is absent (the position is then where it would go).
func (t *table) find(h uint64, s *slab) (int, uint32) {
	if len(t.slots) == 0 {
		return -1, 0
	}
	mask := len(t.slots) - 1
	tg := tag(h)
	for i := t.home(h); ; i = (i + 1) & mask {
		v := t.slots[i]
		if v == 0 {
			return i, 0
		}
		if v&^idxMask == tg && s.at(v&idxMask).hash == h {
			return i, v & idxMask
		}
	}
}

// set stores node idx, holding h, at position pos.
func (t *table) set(pos int, idx uint32, h uint64) { t.slots[pos] = tag(h) | idx }

// insert stores idx under its node's hash, which must be absent.
func (t *table) insert(idx uint32, s *slab) {
	if (t.count+1)*4 > len(t.slots)*3 {
		t.grow(s)
	}
	h := s.at(idx).hash
	pos, _ := t.find(h, s)
	t.set(pos, idx, h)
	t.count++
}

func (t *table) grow(s *slab) {
	old := t.slots
	t.slots = make([]uint32, max(minTableSize, 2*len(old)))
	mask := len(t.slots) - 1
	for _, v := range old {
		if v == 0 {
			continue
		}
		i := t.home(s.at(v & idxMask).hash)
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = v
	}
}

// remove empties position pos and shifts later entries of the probe run back
// so every remaining entry stays reachable from its home.
func (t *table) remove(pos int, s *slab) {
	mask := len(t.slots) - 1
	t.count--
	hole := pos
	for j := (hole + 1) & mask; ; j = (j + 1) & mask {
		v := t.slots[j]
		if v == 0 {
			break
		}
		// The entry at j may fill the hole unless its home lies cyclically
		// in (hole, j].
		if (j-t.home(s.at(v&idxMask).hash))&mask >= (j-hole)&mask {
			t.slots[hole] = v
			hole = j
		}
	}
	t.slots[hole] = 0
}
