// Package kvindex is the model servers' own account of which prompt prefixes
// each worker's KV cache holds, built from the KV-cache events they publish
// (vLLM's --kv-events-config) and looked up with the token ids the servers
// give for a prompt (/tokenize).
//
// Every picker replica that subscribes to the same servers reads the same
// events, so a prefix another replica placed is found where it went. The
// index keys a block by its tokens, the key of the block before it and the
// extra keys the server gave it (a cache salt), under a seed of the
// adapter's name: the servers' own block hashes are not used
// as keys (vLLM seeds them per process unless PYTHONHASHSEED is shared), only
// to find an event's parent and to remove what the server evicted.
package kvindex

import (
	"math/bits"
	"sync"

	"github.com/inferpick/inferpick/picker/kvevents"
)

// DefaultMaxBlocksPerWorker bounds the blocks the index keeps for one worker
// when New is given no bound: more than any single GPU's KV cache holds at
// 16 tokens a block. A worker that stores beyond it without removing has its
// further stores ignored until it evicts.
const DefaultMaxBlocksPerWorker = 1 << 20

// Index maps prompt blocks to the workers whose caches hold them. It is safe
// for concurrent use: events are applied under a write lock, one batch at a
// time, and lookups share a read lock.
type Index struct {
	maxPerWorker int

	mu        sync.RWMutex
	blockSize int                 // tokens per block, set by the first stored event
	holders   map[uint64][]holder // block key -> workers holding it
	workers   map[uint32]*worker
	adapters  map[string]int // adapter name -> workers' blocks stored under it
	extraKeys bool           // a stored block came with extra keys (SaltKeyed)
	dropped   Dropped
}

// worker is one worker's blocks: the server's hash of each, mapped to the
// index's key, and the adapter it was stored under.
type worker struct {
	keys map[uint64]held
}

// holder is a worker holding a block key under n of its server's hashes
// (one, unless two of its blocks have the same tokens after the same
// parent).
type holder struct {
	id uint32
	n  uint32
}

type held struct {
	key     uint64
	adapter string
}

// Dropped counts the events or blocks the index could not use.
type Dropped struct {
	// Unchained are stored blocks whose parent the index never saw stored
	// (stored before the subscription began, or the event was lost).
	Unchained int64
	// Malformed are stored events whose token ids do not fill their blocks,
	// or whose block size differs from the index's.
	Malformed int64
	// Full are stored blocks over a worker's bound.
	Full int64
}

// New returns an empty index that keeps at most maxPerWorker blocks for one
// worker (DefaultMaxBlocksPerWorker when maxPerWorker <= 0).
func New(maxPerWorker int) *Index {
	if maxPerWorker <= 0 {
		maxPerWorker = DefaultMaxBlocksPerWorker
	}
	return &Index{
		maxPerWorker: maxPerWorker,
		holders:      map[uint64][]holder{},
		workers:      map[uint32]*worker{},
		adapters:     map[string]int{},
	}
}

// Apply applies one batch of a worker's events in order.
func (ix *Index) Apply(id uint32, events []kvevents.Event) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	w := ix.workers[id]
	if w == nil {
		w = &worker{keys: map[uint64]held{}}
		ix.workers[id] = w
	}
	for i := range events {
		switch ev := &events[i]; ev.Kind {
		case kvevents.BlockStored:
			ix.stored(id, w, ev)
		case kvevents.BlockRemoved:
			for _, h := range ev.Hashes {
				ix.removed(id, w, h)
			}
		case kvevents.AllBlocksCleared:
			ix.clearLocked(id, w)
		}
	}
}

func (ix *Index) stored(id uint32, w *worker, ev *kvevents.Event) {
	bs := ev.BlockSize
	if ix.blockSize == 0 && bs > 0 {
		ix.blockSize = bs
	}
	if bs != ix.blockSize || len(ev.TokenIDs) != len(ev.Hashes)*bs {
		ix.dropped.Malformed++
		return
	}
	adapter := ev.LoraName
	key := seed(adapter)
	if ev.HasParent {
		p, ok := w.keys[ev.Parent]
		if !ok {
			ix.dropped.Unchained += int64(len(ev.Hashes))
			return
		}
		key = p.key
	}
	extra := ev.Extra
	for i, h := range ev.Hashes {
		key = chain(key, ev.TokenIDs[i*bs:(i+1)*bs])
		if len(extra) > 0 && extra[0].Block == i {
			key = mix(key, extra[0].Hash())
			extra = extra[1:]
			ix.extraKeys = true
		}
		if old, ok := w.keys[h]; ok {
			if old.key == key {
				continue
			}
			ix.removed(id, w, h)
		}
		if len(w.keys) >= ix.maxPerWorker {
			ix.dropped.Full += int64(len(ev.Hashes) - i)
			return
		}
		w.keys[h] = held{key: key, adapter: adapter}
		ix.hold(id, key)
		ix.adapters[adapter]++
	}
}

// removed forgets that the worker holds the block the server names h.
func (ix *Index) removed(id uint32, w *worker, h uint64) {
	b, ok := w.keys[h]
	if !ok {
		return
	}
	delete(w.keys, h)
	ix.drop(id, b)
}

// hold adds the worker to the key's holders.
func (ix *Index) hold(id uint32, key uint64) {
	hs := ix.holders[key]
	for i := range hs {
		if hs[i].id == id {
			hs[i].n++
			return
		}
	}
	ix.holders[key] = append(hs, holder{id: id, n: 1})
}

// drop takes one of the worker's blocks off the key's holders.
func (ix *Index) drop(id uint32, b held) {
	hs := ix.holders[b.key]
	for i := range hs {
		if hs[i].id != id {
			continue
		}
		hs[i].n--
		if hs[i].n == 0 {
			hs[i] = hs[len(hs)-1]
			hs = hs[:len(hs)-1]
		}
		break
	}
	if len(hs) == 0 {
		delete(ix.holders, b.key)
	} else {
		ix.holders[b.key] = hs
	}
	ix.adapters[b.adapter]--
	if ix.adapters[b.adapter] <= 0 {
		delete(ix.adapters, b.adapter)
	}
}

// Clear forgets everything the worker holds, as when its events were
// interrupted: what it evicted meanwhile is unknown.
func (ix *Index) Clear(id uint32) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if w := ix.workers[id]; w != nil {
		ix.clearLocked(id, w)
	}
}

// Remove forgets the worker.
func (ix *Index) Remove(id uint32) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if w := ix.workers[id]; w != nil {
		ix.clearLocked(id, w)
		delete(ix.workers, id)
	}
}

func (ix *Index) clearLocked(id uint32, w *worker) {
	for _, b := range w.keys {
		ix.drop(id, b)
	}
	clear(w.keys)
}

// Held returns how many blocks the worker's cache holds, as its events
// tell.
func (ix *Index) Held(id uint32) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if w := ix.workers[id]; w != nil {
		return len(w.keys)
	}
	return 0
}

// SaltKeyed reports whether the servers' events key blocks by their extra
// keys (a cache salt, beyond the adapter), as seen once a block came with
// any. Until then a salted prompt's blocks may look like unsalted ones.
func (ix *Index) SaltKeyed() bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.extraKeys
}

// BlockSize returns the servers' tokens per block, 0 before the first
// stored block.
func (ix *Index) BlockSize() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.blockSize
}

// Stats returns the blocks held over all workers and what was dropped.
func (ix *Index) Stats() (blocks int, dropped Dropped) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	for _, w := range ix.workers {
		blocks += len(w.keys)
	}
	return blocks, ix.dropped
}

// Mixing constants: odd 64-bit values with well-spread bits.
const (
	m0 = 0x9e3779b97f4a7c15
	m1 = 0xbf58476d1ce4e5b9
	m2 = 0x94d049bb133111eb
)

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a^m0, b^m1)
	return hi ^ lo
}

// seed is the key a prompt's first block chains from: the adapter's name
// ("" for the base model), whose blocks the servers keep apart.
func seed(adapter string) uint64 {
	h := uint64(m2)
	for i := 0; i < len(adapter); i++ {
		h = mix(h, uint64(adapter[i]))
	}
	return mix(h, uint64(len(adapter)))
}

// chain is the key of a block of tokens after the block keyed parent.
func chain(parent uint64, tokens []uint32) uint64 {
	h := parent
	for i := 0; i+1 < len(tokens); i += 2 {
		h = mix(h, uint64(tokens[i])|uint64(tokens[i+1])<<32)
	}
	if len(tokens)%2 == 1 {
		h = mix(h, uint64(tokens[len(tokens)-1]))
	}
	return mix(h, uint64(len(tokens)))
}
