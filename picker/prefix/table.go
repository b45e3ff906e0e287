package prefix

// node is one (block, worker) pair: the worker holds the block. Nodes live in
// a shard's slab and are named by 24-bit indices; index 0 is "none". A node
// takes 16 bytes: the block's hash shares a word with the worker's slot,
// and the two list links share one with the tick.
type node struct {
	// key is the block's hash with its low 16 bits replaced by the worker's
	// slot plus one: 0 marks a free node. The table reads only the hash's
	// bits 16 and up (see table.home and tag), so a key stands for its hash,
	// and two blocks are told apart by 48 bits.
	key uint64
	// link holds prev (bits 0–23), the more recently used node of the same
	// worker and shard; next (bits 24–47), the less recently used one, or
	// the free-list link when free; and tick (bits 48–63), the worker's
	// insert tick (see Index.Insert) when the node was last touched, modulo
	// 2^16: the age of a list's tail orders eviction across shards.
	link uint64
}

const (
	keySlotBits = 16
	keySlotMask = 1<<keySlotBits - 1
	linkBits    = 24
	linkMask    = 1<<linkBits - 1
	tickShift   = 2 * linkBits
)

// keyOf is the key of the node by which the worker in slot holds block h.
func keyOf(h uint64, slot uint32) uint64 { return h&^keySlotMask | uint64(slot+1) }

func (n *node) slot() uint32 { return uint32(n.key&keySlotMask) - 1 }

// holds reports whether the node is of block h.
func (n *node) holds(h uint64) bool { return (n.key^h)&^keySlotMask == 0 }

func (n *node) prev() uint32 { return uint32(n.link & linkMask) }
func (n *node) next() uint32 { return uint32(n.link >> linkBits & linkMask) }
func (n *node) tick() uint16 { return uint16(n.link >> tickShift) }

func (n *node) setPrev(i uint32) { n.link = n.link&^linkMask | uint64(i) }
func (n *node) setNext(i uint32) { n.link = n.link&^(linkMask<<linkBits) | uint64(i)<<linkBits }
func (n *node) setTick(t uint16) { n.link = n.link&(1<<tickShift-1) | uint64(t)<<tickShift }

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
		s.free = s.at(i).next()
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
	n := s.at(i)
	*n = node{}
	n.setNext(s.free)
	s.free = i
}

// maxNodes bounds a shard's nodes: a node index takes the low 24 bits of a
// table slot and of a list link.
const maxNodes = 1<<24 - 1

func (s *slab) full() bool { return s.free == 0 && s.next >= maxNodes }

// table maps a block hash to the nodes holding it: open addressing with
// linear probing, one entry per node, so a block's holders are the entries
// of its hash in its probe run: in the order they were added, or since the
// table last grew, in the order of their nodes in the slab. A slot holds
// a node index and eight bits of what the probe needs: how far the entry
// sits past its home position (its displacement, 15 meaning 15 or more)
// and a 4-bit tag of the hash. A probe reads a node (the key) only when
// both agree with the hash sought, and a deletion, which shifts later
// entries back so there are no tombstones, reads none unless an entry sits
// 15 or more past its home.
//
// The table grows by a quarter when three quarters are used, so its slots
// are 60–75% used: four bytes per slot come to 5.3–6.7 bytes an entry.
// Its size need not be a power of two: a hash's home is its bits 16–47
// read as a fraction of the size.
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

func (t *table) home(h uint64) int {
	return int(uint64(uint32(h>>keySlotBits)) * uint64(len(t.slots)) >> 32)
}

// entry is the slot value of node idx, holding h, d positions past its home.
func entry(idx uint32, h uint64, d int) uint32 {
	return uint32(min(d, maxDisp))<<dispShift | tag(h) | idx
}

// step returns the position after i, cyclically.
func (t *table) step(i int) int {
	if i+1 < len(t.slots) {
		return i + 1
	}
	return 0
}

// dist is how far position j lies past position i, cyclically.
func (t *table) dist(i, j int) int {
	if d := j - i; d >= 0 {
		return d
	}
	return j - i + len(t.slots)
}

// disp returns how far the entry v at position j sits past its home.
func (t *table) disp(v uint32, j int, s *slab) int {
	if d := int(v >> dispShift); d < maxDisp {
		return d
	}
	return t.dist(t.home(s.at(v&idxMask).key), j)
}

// cursor walks the probe run of a hash (see table.scan).
type cursor struct{ i, d int }

// start returns a cursor at h's home.
func (t *table) start(h uint64) cursor {
	if len(t.slots) == 0 {
		return cursor{i: -1}
	}
	return cursor{i: t.home(h)}
}

// scan returns the next node holding h from the cursor on, and moves the
// cursor past it; 0 when there is none left.
func (t *table) scan(h uint64, c *cursor, s *slab) uint32 {
	if c.i < 0 {
		return 0
	}
	tg := tag(h)
	for {
		v := t.slots[c.i]
		if v == 0 {
			return 0
		}
		d := c.d
		c.i = t.step(c.i)
		c.d++
		// An entry of another home cannot hold h. One stored as maxDisp
		// is maxDisp or more past its home.
		if sd := int(v >> dispShift); v&tagMask != tg || (sd != d && (sd != maxDisp || d < maxDisp)) {
			continue
		}
		if idx := v & idxMask; s.at(idx).holds(h) {
			return idx
		}
	}
}

// locate returns the position of node idx, which holds h, reading no node.
func (t *table) locate(h uint64, idx uint32) int {
	i := t.home(h)
	for t.slots[i]&idxMask != idx {
		i = t.step(i)
	}
	return i
}

// reserve makes room for one more entry. It comes before the entry's node
// is keyed, since growing enters every keyed node.
func (t *table) reserve(s *slab) {
	if (t.count+1)*4 > len(t.slots)*3 {
		t.grow(s)
	}
}

// add stores node idx, which holds h, after h's other holders. reserve
// made room for it.
func (t *table) add(h uint64, idx uint32) {
	t.put(h, idx)
	t.count++
}

// put stores node idx, which holds h, in the first empty slot from h's
// home, leaving the count to the caller.
func (t *table) put(h uint64, idx uint32) {
	i, d := t.home(h), 0
	for t.slots[i] != 0 {
		i = t.step(i)
		d++
	}
	t.slots[i] = entry(idx, h, d)
}

// held reports whether some node holds h.
func (t *table) held(h uint64, s *slab) bool {
	c := t.start(h)
	return t.scan(h, &c, s) != 0
}

// grow makes the table a quarter larger (at least minTableSize) and enters
// every live node of the slab: read in the slab's order, they come from
// consecutive memory, where reading them in the old table's order would
// take a cache miss each.
func (t *table) grow(s *slab) {
	t.slots = make([]uint32, max(minTableSize, len(t.slots)+len(t.slots)/4))
	for c, chunk := range s.chunks {
		for k := range chunk {
			n := &chunk[k]
			if n.key != 0 {
				t.put(n.key, uint32(c<<chunkBits|k))
			}
		}
	}
}

// remove empties position pos, which holds an entry of h, and shifts later
// entries of the probe run back so every remaining entry stays reachable
// from its home. An entry never passes another of the same home, so a
// block's holders keep their order. With check, remove reports whether h
// has another holder, which it finds in the same pass: h's holders lie
// between h's home and the end of the run.
func (t *table) remove(pos int, h uint64, check bool, s *slab) (others bool) {
	t.count--
	home, tg := t.home(h), tag(h)
	// holds reports whether the entry v at j, d past its home, is of h.
	holds := func(v uint32, j, d int) bool {
		return v&tagMask == tg && t.dist(home, j) == d && s.at(v&idxMask).holds(h)
	}
	if check {
		for j := home; j != pos; j = t.step(j) {
			if v := t.slots[j]; holds(v, j, t.disp(v, j, s)) {
				check, others = false, true
				break
			}
		}
	}
	hole := pos
	for j := pos; ; {
		j = t.step(j)
		v := t.slots[j]
		if v == 0 {
			break
		}
		// The entry at j may fill the hole unless its home lies cyclically
		// in (hole, j].
		d, gap := t.disp(v, j, s), t.dist(hole, j)
		if check && holds(v, j, d) {
			check, others = false, true
		}
		if d >= gap {
			t.slots[hole] = uint32(min(d-gap, maxDisp))<<dispShift | v&^(maxDisp<<dispShift)
			hole = j
		}
	}
	t.slots[hole] = 0
	return others
}
