package prefix

// Match is how much of a prompt one worker holds: its first Blocks blocks.
type Match struct {
	Worker uint32
	Blocks int
}

// Scratch is reusable memory for Match. The zero value is ready; a Scratch
// must not be used by two goroutines at once.
type Scratch struct {
	count   []int32  // by slot: blocks matched so far
	touched []uint32 // slots with count > 0
	out     []Match
}

// Match returns, for every worker holding at least the prompt's first block,
// how many leading blocks it holds. hashes come from Hashes. The walk stops
// at the first block no still-matching worker holds. The result lives in s
// and is valid until s is used again.
func (ix *Index) Match(hashes []uint64, s *Scratch) []Match {
	s.out = s.out[:0]
	s.touched = s.touched[:0]
	matched := 0
	for i, h := range hashes {
		progressed := false
		sh := ix.shard(h)
		sh.mu.Lock()
		for idx := sh.holders(h); idx != 0; {
			n := sh.nodes.at(idx)
			slot := n.slot
			if int(slot) >= len(s.count) {
				s.count = append(s.count, make([]int32, int(slot)+1-len(s.count))...)
			}
			if s.count[slot] == int32(i) {
				if i == 0 {
					s.touched = append(s.touched, slot)
				}
				s.count[slot]++
				progressed = true
			}
			idx = n.same
		}
		sh.mu.Unlock()
		if !progressed {
			break
		}
		matched = i + 1
	}
	for _, slot := range s.touched {
		st := ix.state(slot).Load()
		if st&aliveBit != 0 {
			s.out = append(s.out, Match{Worker: uint32(st), Blocks: int(s.count[slot])})
		}
		s.count[slot] = 0
	}
	ix.lookups.Add(uint64(len(hashes)))
	ix.hits.Add(uint64(matched))
	return s.out
}

// Stats describes the index.
type Stats struct {
	Blocks  int // distinct blocks held by some worker
	Entries int // (block, worker) pairs
	Workers int
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
		st.Blocks += sh.tab.count
		st.Entries += sh.nodes.live
		sh.mu.Unlock()
	}
	ix.mu.RLock()
	st.Workers = len(ix.slotOf)
	ix.mu.RUnlock()
	st.Lookups, st.Hits = ix.lookups.Load(), ix.hits.Load()
	return st
}

// Len returns the number of distinct blocks held.
func (ix *Index) Len() int { return ix.Stats().Blocks }

// WorkerBlocks returns how many blocks the worker holds, 0 if it is unknown.
func (ix *Index) WorkerBlocks(id uint32) int {
	ix.mu.RLock()
	slot, ok := ix.slotOf[id]
	ix.mu.RUnlock()
	if !ok {
		return 0
	}
	total := 0
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.Lock()
		if int(slot) < len(sh.lrus) {
			total += sh.lrus[slot].n
		}
		sh.mu.Unlock()
	}
	return total
}
