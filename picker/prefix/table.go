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
// with linear probing. A slot holds a node index and eight bits of what
// the probe needs: how far the entry sits past its home position (its
// displacement, 15 meaning 15 or more) and a 4-bit tag of the hash. A probe
// reads a node (the key) only when both agree with the hash sought, and a
// deletion, which shifts later entries back so there are no tombstones,
// reads none unless an entry sits 15 or more past its home: four bytes per
// slot, and about one memory access per lookup beyond the slots.
type table struct {
	slots []uint32 // disp<<28 | tag<<24 | node index; 0 is empty
	count int
}

const (
	minTableSize = 64
	idxMask      = 1<<24 - 1
	tagMask      = 0xf << 24
	dispShift    = 28
	maxDisp      = 15 // a displacement this large is read from the node
)

func tag(h uint64) uint32 { return uint32(h>>60) << 24 }

func (t *table) home(h uint64) int { return int((h >> 17) & uint64(len(t.slots)-1)) }

// entry is the slot value of node idx, holding h, d positions past its home.
func entry(idx uint32, h uint64, d int) uint32 {
	return uint32(min(d, maxDisp))<<dispShift | tag(h) | idx
}

// disp returns how far the entry v at position j sits past its home.
func (t *table) disp(v uint32, j int, s *slab) int {
	if d := int(v >> dispShift); d < maxDisp {
		return d
	}
	return (j - t.home(s.at(v&idxMask).hash)) & (len(t.slots) - 1)
}

// find returns the slot position for h and the node index stored there, 0
// when h is absent (the position is then where it would go). known, when
// not 0, is a node holding h: a slot naming it is taken without reading
// the node.
func (t *table) find(h uint64, known uint32, s *slab) (int, uint32) {
	if len(t.slots) == 0 {
		return -1, 0
	}
	mask := len(t.slots) - 1
	tg := tag(h)
	for i, d := t.home(h), 0; ; i, d = (i+1)&mask, d+1 {
		v := t.slots[i]
		if v == 0 {
			return i, 0
		}
		// An entry of another home cannot hold h. One stored as maxDisp
		// is maxDisp or more past its home.
		if sd := int(v >> dispShift); v&tagMask != tg || (sd != d && (sd != maxDisp || d < maxDisp)) {
			continue
		}
		if idx := v & idxMask; idx == known || s.at(idx).hash == h {
			return i, idx
		}
	}
}

// set stores node idx at position pos, in place of the node there, which
// holds the same hash.
func (t *table) set(pos int, idx uint32) { t.slots[pos] = t.slots[pos]&^idxMask | idx }

// insert stores idx under its node's hash, which must be absent; pos is
// where find said it would go.
func (t *table) insert(pos int, idx uint32, s *slab) {
	h := s.at(idx).hash
	if (t.count+1)*4 > len(t.slots)*3 {
		t.grow(s)
		pos, _ = t.find(h, 0, s)
	}
	t.slots[pos] = entry(idx, h, (pos-t.home(h))&(len(t.slots)-1))
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
		h := s.at(v & idxMask).hash
		i, d := t.home(h), 0
		for t.slots[i] != 0 {
			i, d = (i+1)&mask, d+1
		}
		t.slots[i] = entry(v&idxMask, h, d)
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
		if d, gap := t.disp(v, j, s), (j-hole)&mask; d >= gap {
			t.slots[hole] = uint32(min(d-gap, maxDisp))<<dispShift | v&^(maxDisp<<dispShift)
			hole = j
		}
	}
	t.slots[hole] = 0
}
