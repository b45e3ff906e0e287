package kvcache

import "container/list"

// Cache is a pool of GPU KV blocks with prefix caching. Blocks hold either a
// hashed full prompt block (shareable, kept after release until evicted) or
// anonymous space (the partial last prompt block and the output tokens),
// which is returned to the pool on release.
//
// A block referenced by a lease is never evicted. Unreferenced hashed blocks
// stay cached and are evicted least recently released first; a request's
// blocks are released tail first, so a prefix outlives its extensions.
//
// Cache is not safe for concurrent use; its owner serializes calls.
type Cache struct {
	observer   Observer
	capacity   int
	blocks     map[uint64]*block
	free       *list.List // unreferenced hashed blocks, front = evicted first
	referenced int        // hashed blocks with refs > 0, plus anonymous ones
	anonymous  int
}

type block struct {
	hash uint64
	refs int
	elem *list.Element // position in free while refs == 0
}

// Observer is told of every hashed block that enters or leaves the cache,
// as vLLM's KV-cache events tell. Its methods run inside Acquire: first
// Removed for each block evicted, then Stored for each run of blocks the
// call filled in, in prompt order.
type Observer interface {
	// Stored: hashes[from:to] entered the cache, a contiguous run of the
	// blocks of a request whose blocks are hashes. hashes[from-1], when
	// from > 0, was cached already. The observer must not keep hashes.
	Stored(hashes []uint64, from, to int)
	// Removed: the block h was evicted.
	Removed(h uint64)
}

// SetObserver sets the observer of the cache's blocks (nil: none).
func (c *Cache) SetObserver(o Observer) { c.observer = o }

// Lease is the set of blocks one request holds. Hand it back with Release
// exactly once.
type Lease struct {
	hashes    []uint64
	anonymous int
}

// Blocks returns how many blocks the lease holds.
func (l Lease) Blocks() int { return len(l.hashes) + l.anonymous }

// New returns an empty cache of capacity blocks.
func New(capacity int) *Cache {
	return &Cache{capacity: capacity, blocks: map[uint64]*block{}, free: list.New()}
}

// Capacity returns the number of blocks in the pool.
func (c *Cache) Capacity() int { return c.capacity }

// Used returns the number of blocks held by leases.
func (c *Cache) Used() int { return c.referenced }

// Cached returns the number of hashed blocks present, referenced or not.
func (c *Cache) Cached() int { return len(c.blocks) }

// Usage returns the fraction of the pool held by leases, in [0, 1]. Cached
// blocks nobody references count as free, as in vLLM.
func (c *Cache) Usage() float64 {
	if c.capacity == 0 {
		return 0
	}
	return float64(c.referenced) / float64(c.capacity)
}

// Match returns the length of the leading run of hashes that are cached.
func (c *Cache) Match(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := c.blocks[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// Acquire takes a reference on the hashed blocks (reusing cached ones,
// filling in the others) plus anonymous more blocks. It evicts unreferenced
// cached blocks as needed. It reports false, and changes nothing, when the
// unreferenced space is too small.
func (c *Cache) Acquire(hashes []uint64, anonymous int) (Lease, bool) {
	need := anonymous
	for _, h := range hashes {
		if b, ok := c.blocks[h]; !ok || b.refs == 0 {
			need++
		}
	}
	if need > c.capacity-c.referenced {
		return Lease{}, false
	}
	// Pin what is cached first, so filling in the rest cannot evict it.
	for _, h := range hashes {
		if b, ok := c.blocks[h]; ok {
			c.ref(b)
		}
	}
	filled := c.fill(hashes)
	for range anonymous {
		c.makeRoom()
		c.anonymous++
		c.referenced++
	}
	if c.observer != nil {
		notifyRuns(c.observer, hashes, filled)
	}
	return Lease{hashes: hashes, anonymous: anonymous}, true
}

// fill puts in the hashes that are not cached, each with a reference, and
// returns which ones it put in when there is an observer to tell.
func (c *Cache) fill(hashes []uint64) []bool {
	var filled []bool
	if c.observer != nil {
		filled = make([]bool, len(hashes))
	}
	for i, h := range hashes {
		if _, ok := c.blocks[h]; ok {
			continue
		}
		c.makeRoom()
		b := &block{hash: h}
		c.blocks[h] = b
		c.ref(b)
		if filled != nil {
			filled[i] = true
		}
	}
	return filled
}

// Release drops the lease's references. Hashed blocks stay cached.
func (c *Cache) Release(l Lease) {
	for i := len(l.hashes) - 1; i >= 0; i-- {
		b, ok := c.blocks[l.hashes[i]]
		if !ok || b.refs == 0 {
			continue
		}
		b.refs--
		if b.refs == 0 {
			c.referenced--
			b.elem = c.free.PushBack(b)
		}
	}
	c.anonymous -= l.anonymous
	c.referenced -= l.anonymous
}

func (c *Cache) ref(b *block) {
	if b.refs == 0 {
		c.referenced++
		if b.elem != nil {
			c.free.Remove(b.elem)
			b.elem = nil
		}
	}
	b.refs++
}

// makeRoom evicts the least recently released block if the pool is full.
// Acquire has checked that there is one.
func (c *Cache) makeRoom() {
	if len(c.blocks)+c.anonymous < c.capacity {
		return
	}
	front := c.free.Front()
	if front == nil {
		return
	}
	b := c.free.Remove(front).(*block)
	delete(c.blocks, b.hash)
	if c.observer != nil {
		c.observer.Removed(b.hash)
	}
}

// notifyRuns tells o of each run of hashes marked filled.
func notifyRuns(o Observer, hashes []uint64, filled []bool) {
	for from := 0; from < len(filled); {
		if !filled[from] {
			from++
			continue
		}
		to := from + 1
		for to < len(filled) && filled[to] {
			to++
		}
		o.Stored(hashes, from, to)
		from = to
	}
}
