package prefix

// Match is how much of a prompt one worker holds: its first Blocks blocks.
type Match struct {
	Worker uint32
	Blocks int
}

// Scratch is reusable memory for Match. The zero value is ready; a Scratch
// must not be used by two goroutines at once.
type Scratch struct {
	count   []int32  // by slot: matched blocks, 0 while not found
	touched []uint32 // slots with count > 0
	out     []Match
}

// maxLevels bounds the distinct match lengths Match looks for.
const maxLevels = 32

// Match returns the workers holding a prefix of the prompt and how many
// leading blocks each holds. hashes come from Hashes. The result lives in s
// and is valid until s is used again.
//
// A hash names its whole prefix, so a worker holding block i was sent
// blocks 0..i: its match is one past the last block it holds. Match finds
// that block by a galloping binary search rather than walking every block,
// one search per distinct match length, longest first, so a pick looks up a
// few dozen blocks even for a prompt of thousands. The result is exact when every
// worker holds a leading run of the prompt's blocks, which is what Insert
// keeps (the head of a prompt is evicted last); when eviction has left holes
// a worker's match may be counted up to its last block held.
func (ix *Index) Match(hashes []uint64, s *Scratch) []Match {
	s.out = s.out[:0]
	s.touched = s.touched[:0]
	longest := 0
	for hi, level := len(hashes), 0; hi > 0 && level < maxLevels; level++ {
		// Probe blocks 0, 1, 3, 7, ... below hi and keep the deepest with
		// a holder not found yet: a worker pushed out of a widely shared
		// head (see WithMaxHolders) is still found by the blocks it holds
		// alone further on.
		lo, up := -1, hi
		for i := 0; i < hi; i = 2*i + 1 {
			if ix.unfound(hashes, i, s) {
				lo, up = i, min(2*i+1, hi)
			}
		}
		if lo < 0 {
			break
		}
		for up-lo > 1 { // unfound holders at lo; none at up (or up is hi)
			mid := int(uint(lo+up) >> 1)
			if ix.unfound(hashes, mid, s) {
				lo = mid
			} else {
				up = mid
			}
		}
		ix.collect(hashes, lo, s)
		longest = max(longest, lo+1)
		hi = lo
	}
	for _, slot := range s.touched {
		st := ix.state(slot).Load()
		if st&aliveBit != 0 {
			s.out = append(s.out, Match{Worker: uint32(st), Blocks: int(s.count[slot])})
		}
		s.count[slot] = 0
	}
	ix.lookups.Add(uint64(len(hashes)))
	ix.hits.Add(uint64(longest))
	return s.out
}

// unfound reports whether some holder of block i has no match recorded in s
// yet.
func (ix *Index) unfound(hashes []uint64, i int, s *Scratch) bool {
	h := hashes[i]
	sh := ix.shardOf(hashes, i)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := sh.tab.start(h)
	for idx := sh.tab.scan(h, &c, &sh.nodes); idx != 0; idx = sh.tab.scan(h, &c, &sh.nodes) {
		if slot := sh.nodes.at(idx).slot(); int(slot) >= len(s.count) || s.count[slot] == 0 {
			return true
		}
	}
	return false
}

// collect records a match of i+1 blocks for every holder of block i not
// yet found.
func (ix *Index) collect(hashes []uint64, i int, s *Scratch) {
	h, blocks := hashes[i], i+1
	sh := ix.shardOf(hashes, i)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := sh.tab.start(h)
	for idx := sh.tab.scan(h, &c, &sh.nodes); idx != 0; idx = sh.tab.scan(h, &c, &sh.nodes) {
		slot := sh.nodes.at(idx).slot()
		if int(slot) >= len(s.count) {
			s.count = append(s.count, make([]int32, int(slot)+1-len(s.count))...)
		}
		if s.count[slot] == 0 {
			s.count[slot] = int32(blocks)
			s.touched = append(s.touched, slot)
		}
	}
}

// Stats describes the index.
type Stats struct {
	Blocks  int // distinct blocks held by some worker
	Entries int // (block, worker) pairs
	// Capacity is the hard cap on Entries.
	Capacity int
	Workers  int
	// Lookups counts prompt blocks passed to Match; Hits those of them some
	// worker held as part of a matched prefix.
	Lookups, Hits uint64
}

// HitRatio is Hits/Lookups, 0 before any lookup.
func (s Stats) HitRatio() float64 {
	if s.Lookups == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Lookups)
}

// Stats returns the current counts, each shard read under its own lock.
func (ix *Index) Stats() Stats {
	var st Stats
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.Lock()
		st.Blocks += sh.blocks
		st.Entries += sh.nodes.live
		sh.mu.Unlock()
	}
	ix.mu.RLock()
	st.Workers = len(ix.slotOf)
	ix.mu.RUnlock()
	st.Capacity = ix.Capacity()
	st.Lookups, st.Hits = ix.lookups.Load(), ix.hits.Load()
	return st
}

// Held returns how many blocks the worker holds, 0 if it is unknown: a
// counter kept by Insert and eviction, read without visiting the shards.
func (ix *Index) Held(id uint32) int {
	ix.mu.RLock()
	slot, ok := ix.slotOf[id]
	ix.mu.RUnlock()
	if !ok {
		return 0
	}
	return int(ix.heldBy(slot).Load())
}

// HitRatio returns the share of looked-up blocks some worker held, over
// the index's life: how much the traffic reuses prefixes at all.
func (ix *Index) HitRatio() float64 {
	l := ix.lookups.Load()
	if l == 0 {
		return 0
	}
	return float64(ix.hits.Load()) / float64(l)
}
