// Package prefix is an approximate index of which workers hold which prompt
// prefixes in their KV cache, learned from the picker's own routing decisions.
//
// A prompt is cut into blocks of BlockSize bytes, and block i is named by a
// hash chained over blocks 0..i, seeded by the model and cache salt. The index
// maps a block hash to the workers that were sent it, each worker's blocks
// kept in least-recently-used order and bounded by that worker's KV capacity
// and by its fair share of a hard cap on the whole index.
// The index is split into shards by groups of 64 consecutive blocks; every
// operation locks one shard for at most one group at a time, so no lock is
// held across a whole pick.
package prefix

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// Index is the prefix index. It is safe for concurrent use.
type Index struct {
	key       uint64
	shards    []shard
	shardMask uint64
	defCap    int
	holders   int
	maxBlocks int
	shardCap  int          // most nodes one shard holds: maxBlocks / shards
	workers   atomic.Int64 // workers added and not removed
	holding   atomic.Int64 // of those, the workers holding at least one block

	mu     sync.RWMutex      // guards slotOf, free and nslots
	slotOf map[uint32]uint32 // worker ID → slot
	free   []uint32
	nslots uint32
	// states[slot>>slotChunkBits][slot&slotChunkMask] holds alive<<32|workerID.
	// Chunks are never moved, so a state can be read without mu.
	states [maxSlotChunks]atomic.Pointer[[slotChunkSize]atomic.Uint64]
	// counters holds each slot's blocks over all shards and its insert
	// tick, chunked as states.
	counters [maxSlotChunks]atomic.Pointer[[slotChunkSize]slotCounters]

	lookups atomic.Uint64 // prompt blocks looked up by Match
	hits    atomic.Uint64 // of those, blocks some worker held
}

const (
	slotChunkBits = 8
	slotChunkSize = 1 << slotChunkBits
	slotChunkMask = slotChunkSize - 1
	maxSlotChunks = 1 << 8
	maxSlots      = 1<<keySlotBits - 1 // live workers: a node keeps its slot plus one in 16 bits
	aliveBit      = uint64(1) << 32
)

// DefaultCapacity is the per-worker bound, in blocks, used when a caller
// passes no capacity of its own (1 MiB of prompt text).
const DefaultCapacity = 1 << 14

// DefaultMaxHolders is how many workers a block remembers by default.
const DefaultMaxHolders = 8

// DefaultMaxBlocks is the default hard cap on the index, in (block, worker)
// entries: 4Mi entries take about 90 MiB at the index's 22–23 bytes an
// entry (a 16-byte node and its table slot; BenchmarkIndexMemory,
// BenchmarkIndexAtCap).
const DefaultMaxBlocks = 1 << 22

// Option configures an Index.
type Option func(*Index)

// WithShards sets the number of shards, rounded up to a power of two.
// One shard makes every worker's LRU order exact.
func WithShards(n int) Option {
	return func(ix *Index) {
		s := 1
		for s < n {
			s <<= 1
		}
		ix.shards = make([]shard, s)
	}
}

// WithDefaultCapacity sets the bound used when Insert is given none.
func WithDefaultCapacity(blocks int) Option {
	return func(ix *Index) {
		if blocks > 0 {
			ix.defCap = blocks
		}
	}
}

// WithMaxHolders sets how many workers one block remembers. A prefix shared
// by the whole pool (a common system prompt) is then known on a few workers
// only, which bounds the work of Match and Insert per block. A worker pushed
// out of such a shared head is still matched by the blocks it holds alone
// further on (its conversation), which are the ones that matter for routing.
func WithMaxHolders(n int) Option {
	return func(ix *Index) {
		if n > 0 {
			ix.holders = n
		}
	}
}

// WithMaxBlocks sets the hard cap on the index: the (block, worker) entries
// it holds, whatever capacity the workers claim. Each worker is bounded by
// the smaller of its capacity and its fair share of the cap (see Bound),
// and a shard that is full evicts before it grows. The cap is rounded down
// to a multiple of the shard count, and is at least one entry per shard.
func WithMaxBlocks(n int) Option {
	return func(ix *Index) {
		if n > 0 {
			ix.maxBlocks = n
		}
	}
}

// New returns an empty index. Its hashes are keyed by a random secret, so
// they mean nothing to another index or another process.
func New(opts ...Option) *Index {
	ix := &Index{
		key:       rand.Uint64(),
		shards:    make([]shard, 16),
		defCap:    DefaultCapacity,
		holders:   DefaultMaxHolders,
		maxBlocks: DefaultMaxBlocks,
		slotOf:    map[uint32]uint32{},
	}
	for _, o := range opts {
		o(ix)
	}
	ix.shardMask = uint64(len(ix.shards) - 1)
	for i := range ix.shards {
		ix.shards[i].held = ix
	}
	ix.shardCap = max(1, ix.maxBlocks/len(ix.shards))
	return ix
}

// groupBlocks consecutive blocks of a prompt share a shard: the one their
// group's first hash falls in. Prompts sharing a block share its group's
// first block too, so they agree on the shard. Insert then takes one lock
// per group, and a group's blocks sit together in a worker's LRU list.
const groupBlocks = 64

// shard returns the shard of a group, given the hash of its first block.
func (ix *Index) shard(first uint64) *shard { return &ix.shards[first&ix.shardMask] }

// shardOf returns the shard of block i of a hash chain.
func (ix *Index) shardOf(hashes []uint64, i int) *shard {
	return ix.shard(hashes[i&^(groupBlocks-1)])
}

func (ix *Index) state(slot uint32) *atomic.Uint64 {
	return &ix.states[slot>>slotChunkBits].Load()[slot&slotChunkMask]
}

// slotCounters are one worker slot's counters.
type slotCounters struct {
	held atomic.Int64 // blocks over all shards
	// tick counts the block groups inserted for the worker: the recency
	// of its nodes, compared modulo 2^16 (see Insert).
	tick atomic.Uint64
}

// heldBy returns the count of blocks the worker in slot holds.
func (ix *Index) heldBy(slot uint32) *atomic.Int64 {
	return &ix.counters[slot>>slotChunkBits].Load()[slot&slotChunkMask].held
}

// addHeld adds d to the blocks the worker in slot holds, and counts the
// worker in or out of the holding workers when that takes it from or to
// none.
func (ix *Index) addHeld(slot uint32, d int64) {
	switch n := ix.heldBy(slot).Add(d); {
	case d > 0 && n == d:
		ix.holding.Add(1)
	case d < 0 && n == 0:
		ix.holding.Add(-1)
	}
}

func (ix *Index) tickOf(slot uint32) *atomic.Uint64 {
	return &ix.counters[slot>>slotChunkBits].Load()[slot&slotChunkMask].tick
}

// Capacity returns the hard cap on the entries the index holds.
func (ix *Index) Capacity() int { return ix.shardCap * len(ix.shards) }

// Bound returns the most blocks a worker given capacity may hold now: the
// smaller of capacity and its fair share of the cap among the workers that
// hold blocks (with the worker asking). Workers the traffic has not reached
// take no share: in a large pool, most of the cap would otherwise stay
// empty while the workers in use forget their prompts. A capacity ≤ 0
// means the default. Insert enforces it over all shards together (see
// shrink and shard.evict), so a prompt whose groups fall unevenly over the
// shards is kept whole within the bound.
func (ix *Index) Bound(capacity int) int {
	if capacity <= 0 {
		capacity = ix.defCap
	}
	share := ix.Capacity() / int(max(1, min(ix.holding.Load()+1, ix.workers.Load())))
	return max(1, min(capacity, share))
}

// AddWorker lets the index hold blocks for the worker. Insert ignores workers
// that were never added or were removed. Adding a worker twice is harmless.
func (ix *Index) AddWorker(id uint32) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if _, ok := ix.slotOf[id]; ok {
		return
	}
	var slot uint32
	if n := len(ix.free); n > 0 {
		slot, ix.free = ix.free[n-1], ix.free[:n-1]
	} else {
		if ix.nslots == maxSlots {
			return // the index is full: the worker's prompts are not indexed
		}
		slot = ix.nslots
		ix.nslots++
		if c := &ix.states[slot>>slotChunkBits]; c.Load() == nil {
			ix.counters[slot>>slotChunkBits].Store(new([slotChunkSize]slotCounters))
			c.Store(new([slotChunkSize]atomic.Uint64))
		}
	}
	ix.state(slot).Store(aliveBit | uint64(id))
	ix.slotOf[id] = slot
	ix.workers.Add(1)
}

// RemoveWorker drops every block the worker holds. From the moment it is
// called, the worker appears in no new match and gains no block.
func (ix *Index) RemoveWorker(id uint32) {
	ix.mu.Lock()
	slot, ok := ix.slotOf[id]
	if ok {
		delete(ix.slotOf, id)
		ix.state(slot).Store(0)
		ix.workers.Add(-1)
	}
	ix.mu.Unlock()
	if !ok {
		return
	}
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.Lock()
		sh.purge(slot)
		sh.mu.Unlock()
	}
	ix.mu.Lock()
	ix.free = append(ix.free, slot)
	ix.mu.Unlock()
}

// Insert records that the worker was sent a prompt with these block hashes
// (a whole chain from Hashes, block 0 first): it now holds them all, most
// recently used. capacity is the worker's KV capacity in blocks (≤ 0: the
// default); its least recently used blocks beyond Bound(capacity) are
// forgotten. When a shard is at the index's cap, the worker's own least
// recently used block there makes room if it holds its bound, else that of
// the worker holding the most there (which happens when workers joined
// since others filled their larger shares).
func (ix *Index) Insert(id uint32, capacity int, hashes []uint64) {
	ix.mu.RLock()
	slot, ok := ix.slotOf[id]
	ix.mu.RUnlock()
	if !ok || len(hashes) == 0 {
		return
	}
	want := aliveBit | uint64(id)
	st := ix.state(slot)
	// Blocks past the worker's limit would be the first shrink evicts.
	limit := ix.Bound(capacity)
	hashes = hashes[:min(len(hashes), limit)]
	// Each group of the prompt gets its own tick of the worker, the head's
	// the newest: a worker's nodes are then ordered by last use across
	// shards, and a prompt's tail goes before its head, since a prefix is
	// useless once an earlier block is gone.
	groups := uint64((len(hashes) + groupBlocks - 1) / groupBlocks)
	last := ix.tickOf(slot).Add(groups)
	// Last group first, and within a group last block first, so that each
	// shard's list also has the prompt's head most recent.
	for g := (len(hashes) - 1) &^ (groupBlocks - 1); g >= 0; g -= groupBlocks {
		sh := ix.shard(hashes[g])
		sh.mu.Lock()
		// Checked under the shard lock: RemoveWorker clears the state before
		// purging each shard, so a block added here is either purged or
		// never added.
		if st.Load() != want {
			sh.mu.Unlock()
			return
		}
		tick := uint16(last - uint64(g/groupBlocks))
		sh.insertGroup(slot, hashes[g:min(g+groupBlocks, len(hashes))], tick, uint16(last-groups+1), limit, ix.holders, ix.shardCap)
		sh.mu.Unlock()
	}
	if ix.heldBy(slot).Load() > int64(limit) {
		ix.shrink(slot, want, limit, uint16(last))
	}
}

// shrink evicts the worker's least recently used blocks until it holds at
// most limit, oldest first across shards: each round evicts from the list
// whose tail is oldest, down to the age of the next oldest list's tail. A
// prompt longer than the limit loses its own tail, as in one list; blocks
// of inserts since the one that called it (ticks after last) stay. Ages are
// ticks of the worker modulo 2^16, read as signed: a node left untouched for
// 32,768 of the worker's inserts may pass for young.
func (ix *Index) shrink(slot uint32, want uint64, limit int, last uint16) {
	st, held, ticks := ix.state(slot), ix.heldBy(slot), ix.tickOf(slot)
	for held.Load() > int64(limit) {
		now := uint16(ticks.Load())
		// A node touched by an insert running concurrently may carry a
		// tick after now: its age is negative, counted as 0.
		age := func(sh *shard, l *lru) int { return max(0, int(int16(now-sh.nodes.at(l.tail).tick()))) }
		keep := int(int16(now - last)) // younger nodes are of later inserts
		victim, oldest, next := -1, 0, 0
		for i := range ix.shards {
			sh := &ix.shards[i]
			sh.mu.Lock()
			if int(slot) < len(sh.lrus) {
				if l := &sh.lrus[slot]; l.n > 0 {
					switch a := age(sh, l); {
					case victim < 0 || a > oldest:
						next, victim, oldest = oldest, i, a
					case a > next:
						next = a
					}
				}
			}
			sh.mu.Unlock()
		}
		if victim < 0 || oldest < keep {
			return
		}
		sh := &ix.shards[victim]
		sh.mu.Lock()
		if st.Load() != want {
			sh.mu.Unlock()
			return
		}
		sh.dropOld(sh.list(slot), int(held.Load())-limit, now, max(next, keep))
		sh.mu.Unlock()
	}
}
