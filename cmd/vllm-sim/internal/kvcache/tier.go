package kvcache

import "container/list"

// Tier is an offloading tier behind the GPU pool, as vLLM's
// OffloadingConnector with its CPU backend keeps one: copies of computed
// prompt blocks under the GPU blocks' hashes, least recently stored or used
// evicted first. A prompt whose blocks left the GPU pool but not the tier
// is loaded back instead of computed again.
//
// Tier is not safe for concurrent use; its owner serializes calls.
type Tier struct {
	observer Observer
	capacity int
	blocks   map[uint64]*list.Element
	lru      *list.List // of uint64 hashes, front = evicted first
}

// NewTier returns an empty tier of capacity blocks.
func NewTier(capacity int) *Tier {
	return &Tier{capacity: capacity, blocks: map[uint64]*list.Element{}, lru: list.New()}
}

// SetObserver sets the observer of the tier's blocks (nil: none). Its
// methods run inside Store: Removed for each block evicted to make room,
// then Stored for each run of blocks put in.
func (t *Tier) SetObserver(o Observer) { t.observer = o }

// Len returns the number of blocks the tier holds.
func (t *Tier) Len() int { return len(t.blocks) }

// Match returns the length of the leading run of hashes the tier holds.
func (t *Tier) Match(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := t.blocks[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// Store copies a request's computed blocks into the tier: those it holds
// become the most recently used, the others are put in, each evicting the
// least recently used block once the tier is full. Of a request longer
// than the tier, its leading blocks are kept.
func (t *Tier) Store(hashes []uint64) {
	hashes = hashes[:min(len(hashes), t.capacity)]
	var filled []bool
	if t.observer != nil {
		filled = make([]bool, len(hashes))
	}
	for i, h := range hashes {
		if el, ok := t.blocks[h]; ok {
			t.lru.MoveToBack(el)
			continue
		}
		if len(t.blocks) == t.capacity {
			old := t.lru.Remove(t.lru.Front()).(uint64)
			delete(t.blocks, old)
			if t.observer != nil {
				t.observer.Removed(old)
			}
		}
		t.blocks[h] = t.lru.PushBack(h)
		if filled != nil {
			filled[i] = true
		}
	}
	if t.observer != nil {
		notifyRuns(t.observer, hashes, filled)
	}
}
