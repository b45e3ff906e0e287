package prefix

import "sync"

// lru is one worker's recency list inside a shard: head is the most recently
// used node, tail the least.
type lru struct {
	head, tail uint32
	n          int
}

// shard holds the blocks whose hash falls in it. Every method expects mu to
// be held.
type shard struct {
	mu     sync.Mutex
	tab    table
	nodes  slab
	blocks int    // distinct blocks held
	lrus   []lru  // by worker slot
	held   *Index // counts every worker's blocks over all shards
	_      [64]byte
}

func (sh *shard) list(slot uint32) *lru {
	if int(slot) >= len(sh.lrus) {
		sh.lrus = append(sh.lrus, make([]lru, int(slot)+1-len(sh.lrus))...)
	}
	return &sh.lrus[slot]
}

// insertGroup records that the worker in slot holds the blocks hs now (a
// group of a prompt, see Index.Insert), touching them last first at tick.
//
// When a prompt is inserted again in the same order, the node of block i-1
// sits just before that of block i in the worker's list, so a run of the
// group's blocks is found by following the list instead of the table. Such
// a run is already in order: it is moved to the front as a whole, once it
// ends, which leaves the list as touching its blocks one by one would.
func (sh *shard) insertGroup(slot uint32, hs []uint64, tick, since uint16, limit, maxHolders, shardCap int) {
	var first, last uint32 // the run found through the list, first at its head
	hint := uint32(0)      // the node before the last one touched
	gained := int64(0)     // nodes added and not counted yet (see touch)
	for i := len(hs) - 1; i >= 0; i-- {
		h := hs[i]
		if hint != 0 {
			if n := sh.nodes.at(hint); n.key == keyOf(h, slot) {
				n.setTick(tick)
				if last == 0 {
					last = hint
				}
				first, hint = hint, n.prev()
				continue
			}
		}
		if last != 0 {
			sh.moveFront(&sh.lrus[slot], first, last)
			first, last = 0, 0
		}
		hint = sh.touch(slot, h, tick, since, limit, maxHolders, shardCap, &gained)
	}
	if last != 0 {
		sh.moveFront(&sh.lrus[slot], first, last)
	}
	sh.count(slot, &gained)
}

// touch records that the worker in slot holds h now: the block becomes its
// most recently used here (Insert evicts the worker's blocks past its limit
// over all shards once the prompt is in, see Index.shrink). A block keeps at
// most maxHolders holders; a new holder beyond that pushes out the first in
// the table's order, mostly the one that came first (see table). A shard
// holding shardCap nodes makes room first (see evict).
//
// touch returns the worker's node before h's in its list when h was held
// already (see insertGroup), else 0. The node gets the worker's insert
// tick. A node it adds is counted in *gained, which the caller adds to the
// worker's blocks; touch adds it first when it drops one of the worker's
// nodes, so that no eviction is counted before the addition it undoes and
// the count never goes below zero.
func (sh *shard) touch(slot uint32, h uint64, tick, since uint16, limit, maxHolders, shardCap int, gained *int64) uint32 {
	c := sh.tab.start(h)
	holders := 0
	var first uint32
	for idx := sh.tab.scan(h, &c, &sh.nodes); idx != 0; idx = sh.tab.scan(h, &c, &sh.nodes) {
		n := sh.nodes.at(idx)
		if n.slot() == slot {
			next := n.prev()
			sh.refresh(sh.list(slot), idx, tick)
			return next
		}
		if holders == 0 {
			first = idx
		}
		holders++
	}
	if holders >= maxHolders {
		sh.drop(&sh.lrus[sh.nodes.at(first).slot()], first, holders > 1)
		holders--
	}
	if sh.nodes.live >= shardCap {
		sh.count(slot, gained)
		sh.evict(slot, since, limit)
		holders = 0
		if sh.tab.held(h, &sh.nodes) {
			holders = 1
		}
	}
	if sh.nodes.full() {
		return 0
	}
	sh.tab.reserve(&sh.nodes)
	idx := sh.nodes.alloc()
	sh.tab.add(h, idx)
	if holders == 0 {
		sh.blocks++
	}
	n := sh.nodes.at(idx)
	n.key = keyOf(h, slot)
	n.setTick(tick)
	sh.pushFront(sh.list(slot), idx)
	*gained++
	return 0
}

// count adds the nodes gained to the worker's blocks.
func (sh *shard) count(slot uint32, gained *int64) {
	if *gained != 0 {
		sh.held.addHeld(slot, *gained)
		*gained = 0
	}
}

// evict drops one node of a full shard. A worker holding its limit over
// all shards gives up its least recently used block here, when that block
// is older than the insert asking (whose oldest tick is since). Otherwise
// the worker holding the most blocks over all shards, of those with blocks
// here, gives up its least recently used one here: the cap is shared by
// the workers' totals, not shard by shard, since a prompt's groups fall
// unevenly over the shards and a worker's fair share of one shard may be
// less than its prompt puts there. The scan over workers happens only when
// the asking worker is under its limit or holds nothing older here, after
// workers joined.
func (sh *shard) evict(slot uint32, since uint16, limit int) {
	if l := sh.list(slot); l.tail != 0 && sh.held.heldBy(slot).Load() >= int64(limit) &&
		int16(since-sh.nodes.at(l.tail).tick()) > 0 {
		sh.drop(l, l.tail, false)
		return
	}
	victim, most := -1, int64(0)
	for s := range sh.lrus {
		if sh.lrus[s].n == 0 {
			continue
		}
		if n := sh.held.heldBy(uint32(s)).Load(); victim < 0 || n > most {
			victim, most = s, n
		}
	}
	if victim >= 0 {
		l := &sh.lrus[victim]
		sh.drop(l, l.tail, false)
	}
}

// purge drops every block the worker in slot holds in this shard.
func (sh *shard) purge(slot uint32) {
	if int(slot) >= len(sh.lrus) {
		return
	}
	l := &sh.lrus[slot]
	for l.head != 0 {
		sh.drop(l, l.head, false)
	}
}

// dropOld drops up to count of the list's least recently used nodes while
// the tail is at least minAge ticks older than now (a tick after now counts
// as now). It looks up the table positions of a batch of victims before
// dropping any, so that the lookups, which depend on nothing but the
// victims' keys, overlap in memory.
func (sh *shard) dropOld(l *lru, count int, now uint16, minAge int) {
	var batch [32]struct {
		idx uint32
		pos int
	}
	dropped := 0
	for dropped < count {
		k := 0
		for idx := l.tail; idx != 0 && k < min(count-dropped, len(batch)); k++ {
			n := sh.nodes.at(idx)
			if max(0, int(int16(now-n.tick()))) < minAge {
				break
			}
			batch[k].idx, idx = idx, n.prev()
		}
		for i := range batch[:k] {
			b := &batch[i]
			b.pos = sh.tab.locate(sh.nodes.at(b.idx).key, b.idx)
		}
		if k > 0 {
			sh.held.addHeld(sh.nodes.at(batch[0].idx).slot(), -int64(k))
		}
		for _, b := range batch[:k] {
			sh.dropAt(l, b.idx, b.pos, false)
		}
		dropped += k
		if k < len(batch) {
			return
		}
	}
}

// drop removes node idx from its worker's list and from its block; shared
// tells that the block is known to keep another holder.
func (sh *shard) drop(l *lru, idx uint32, shared bool) {
	sh.held.addHeld(sh.nodes.at(idx).slot(), -1)
	sh.dropAt(l, idx, -1, shared)
}

// dropAt is drop but for the count of the worker's blocks, left to the
// caller, given where the table held idx when looked up before (-1: not
// looked up; a removal since may have moved the entry).
func (sh *shard) dropAt(l *lru, idx uint32, pos int, shared bool) {
	sh.unlink(l, idx)
	h := sh.nodes.at(idx).key
	if pos < 0 || sh.tab.slots[pos]&idxMask != idx {
		pos = sh.tab.locate(h, idx)
	}
	if !sh.tab.remove(pos, h, !shared, &sh.nodes) && !shared {
		sh.blocks--
	}
	sh.nodes.release(idx)
}

func (sh *shard) unlink(l *lru, idx uint32) {
	n := sh.nodes.at(idx)
	prev, next := n.prev(), n.next()
	if prev != 0 {
		sh.nodes.at(prev).setNext(next)
	} else {
		l.head = next
	}
	if next != 0 {
		sh.nodes.at(next).setPrev(prev)
	} else {
		l.tail = prev
	}
	n.setPrev(0)
	n.setNext(0)
	l.n--
}

// refresh makes node idx its worker's most recently used, touched at tick.
func (sh *shard) refresh(l *lru, idx uint32, tick uint16) {
	sh.unlink(l, idx)
	sh.pushFront(l, idx)
	sh.nodes.at(idx).setTick(tick)
}

// moveFront makes the list's nodes from first to last, first nearest the
// head, its most recently used, in the same order.
func (sh *shard) moveFront(l *lru, first, last uint32) {
	if l.head == first {
		return
	}
	f, z := sh.nodes.at(first), sh.nodes.at(last)
	before, after := f.prev(), z.next()
	sh.nodes.at(before).setNext(after)
	if after != 0 {
		sh.nodes.at(after).setPrev(before)
	} else {
		l.tail = before
	}
	f.setPrev(0)
	z.setNext(l.head)
	sh.nodes.at(l.head).setPrev(last)
	l.head = first
}

func (sh *shard) pushFront(l *lru, idx uint32) {
	n := sh.nodes.at(idx)
	n.setPrev(0)
	n.setNext(l.head)
	if l.head != 0 {
		sh.nodes.at(l.head).setPrev(idx)
	} else {
		l.tail = idx
	}
	l.head = idx
	l.n++
}
