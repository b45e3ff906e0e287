// Package kvindex is the model servers' own account of which prompt prefixes
// each worker's KV cache holds, built from the KV-cache events they publish
// (vLLM's --kv-events-config) and looked up with the token ids the servers
// give for a prompt (/tokenize).
//
// Every picker replica that subscribes to the same servers reads the same
// events, so a prefix another replica placed is found where it went. The
// index keys a block by its tokens, the key of the block before it and the
// extra keys the server gave it (a cache salt), under a seed of the
// adapter's name and the server's tokens per block: the servers' own block
// hashes are not used
// as keys (vLLM seeds them per process unless PYTHONHASHSEED is shared), only
// to find an event's parent and to remove what the server evicted.
package kvindex

import (
	"math/bits"
	"slices"
	"strings"
	"sync"

	"github.com/inferpick/inferpick/picker/kvevents"
)

// DefaultMaxBlocksPerWorker bounds the blocks the index keeps for one worker
// (a pod's port, over every engine behind it) when New is given no bound:
// at 16 tokens a block, more than a GPU's KV cache holds, and than most
// nodes' GPUs hold together. A
// worker that stores beyond it without removing has its further stores
// ignored until it evicts.
const DefaultMaxBlocksPerWorker = 1 << 20

// Index maps prompt blocks to the workers whose caches hold them. It is safe
// for concurrent use: events are applied under a write lock, one batch at a
// time, and lookups share a read lock.
type Index struct {
	maxPerWorker int

	mu        sync.RWMutex
	sizes     []sized              // the engines' block sizes, each once
	nodes     slab                 // every engine's blocks (store.go)
	keys      table                // block key -> the first node of its chain
	engines   []*engine            // by slot; nil: free
	freeSlots []uint32             // slots of engines no longer followed
	workers   map[uint32][]*engine // worker -> its engines, by engine number (nil: not followed)
	adapters  adapterTable         // adapter names the workers' blocks are stored under
	loraIDs   loraIDNames          // the names of adapters known by number alone (adapterOf)
	extraKeys bool                 // a stored block came with extra keys (SaltKeyed)
	dropped   Dropped
}

// engine is one engine of a worker and its blocks, found by the server's
// hash of each. A worker has one engine, or several when its server fronts
// data-parallel engines behind one port (vLLM's internal load balancer),
// each publishing events of its own; their hashes may coincide, so each
// engine keeps its own.
type engine struct {
	src    src
	slot   uint32 // in Index.engines: the engine of its nodes
	blocks table
	// group is the KV-cache group whose events the engine follows, -1
	// until a stored event names one (follows); full tells whether its
	// kind is one of full attention.
	group int64
	full  bool
	// blockSize is the tokens per block of the engine's stored events, 0
	// until one is stored: a server's is fixed while it runs, and servers
	// of one pool may differ (two models, or a rollout to another
	// --block-size).
	blockSize int
	// offloaded counts the engine's blocks held only in an offloading
	// tier: copied there, then evicted from the GPU.
	offloaded int
}

// src names an engine: the worker and the engine's number.
type src struct {
	id     uint32
	engine uint32
}

// Dropped counts the events or blocks the index could not use.
type Dropped struct {
	// Unchained are stored blocks whose parent the index never saw stored
	// (stored before the subscription began, or the event was lost).
	Unchained int64
	// Malformed are stored events whose token ids do not fill their blocks,
	// or whose block size differs from the one their engine stored before
	// (a server restarted with another is subscribed again, which clears
	// its engine first).
	Malformed int64
	// Full are stored blocks over a worker's bound, or under a new adapter
	// name while maxAdapters names are held.
	Full int64
	// Offloaded are copies an offloading tier (medium "CPU" and others)
	// stored of blocks the index did not hold on the GPU: with no tokens
	// in the tier's events, they cannot be keyed.
	Offloaded int64
	// OtherGroup are blocks stored in or removed from a KV-cache group
	// other than the one an engine follows: a hybrid model's
	// sliding-window or Mamba layers.
	OtherGroup int64
}

// New returns an empty index that keeps at most maxPerWorker blocks for one
// worker, over all its engines (DefaultMaxBlocksPerWorker when maxPerWorker
// <= 0).
func New(maxPerWorker int) *Index {
	if maxPerWorker <= 0 {
		maxPerWorker = DefaultMaxBlocksPerWorker
	}
	return &Index{
		maxPerWorker: maxPerWorker,
		keys:         newTable(keyTableBits, true),
		workers:      map[uint32][]*engine{},
		adapters:     newAdapterTable(),
		loraIDs:      loraIDNames{},
	}
}

// The parts of the key table and of an engine's: a part doubles on its
// own, so the most a growth rehashes while applying events holds up
// lookups is 1/256 of the keys, or 1/16 of an engine's blocks.
const (
	keyTableBits    = 8
	engineTableBits = 4
)

// MaxEngines bounds the engines of one worker the index follows.
const MaxEngines = 64

// Apply applies one batch of a worker's events in order: those of its
// server's only (or first) engine.
func (ix *Index) Apply(id uint32, events []kvevents.Event) { ix.ApplyEngine(id, 0, events) }

// ApplyEngine applies one batch of the events of engine e (in [0,
// MaxEngines)) of a worker whose server fronts several.
func (ix *Index) ApplyEngine(id uint32, e int, events []kvevents.Event) {
	if e < 0 || e >= MaxEngines {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.compact()
	w := ix.engineLocked(src{id: id, engine: uint32(e)})
	for i := range events {
		ev := &events[i]
		if !ix.follows(w, ev) {
			ix.dropped.OtherGroup += int64(len(ev.Hashes))
			continue
		}
		// An offloading tier (vLLM's OffloadingConnector: medium "CPU")
		// publishes the blocks it copies off the GPU and those it drops,
		// under the GPU blocks' hashes.
		gpu := onGPU(ev.Medium)
		switch ev.Kind {
		case kvevents.BlockStored:
			if gpu {
				ix.stored(w, ev)
			} else {
				ix.offloaded(w, ev.Hashes)
			}
		case kvevents.BlockRemoved:
			for _, h := range ev.Hashes {
				if at, r := w.blocks.find(&ix.nodes, h); r != 0 {
					ix.evicted(w, at, r, gpu)
				}
			}
		case kvevents.AllBlocksCleared:
			ix.clearLocked(w)
		}
	}
}

// offloaded records that an offloading tier holds a copy of the blocks the
// engine's GPU cache held under the hashes, one more for each block. A copy
// of a block the index does not know cannot be keyed (the tier's events
// carry no tokens), and is counted.
func (ix *Index) offloaded(w *engine, hashes []uint64) {
	for _, h := range hashes {
		if _, r := w.blocks.find(&ix.nodes, h); r != 0 {
			if nd := ix.nodes.at(r); nd.adapter&tierBits != tierBits {
				nd.adapter += oneTier
			}
		} else {
			ix.dropped.Offloaded++
		}
	}
}

// evicted records that the GPU (gpu), or an offloading tier, no longer
// holds a copy of node r's block, in slot at of the engine's table, and
// forgets the block once neither the GPU nor any tier holds one. The GPU
// evicting one of several copies keeps the block there; a tier dropping a
// copy keeps the block offloaded while other tiers' copies are counted.
func (ix *Index) evicted(w *engine, at spot, r uint32, gpu bool) {
	nd := ix.nodes.at(r)
	was := offloadedOnly(nd)
	switch {
	case gpu && nd.adapter&copyBits != 0:
		if nd.adapter&copyBits != copyBits {
			nd.adapter -= oneCopy
		}
		return
	case gpu:
		nd.adapter &^= inGPU
	case nd.adapter&tierBits == 0 || nd.adapter&tierBits == tierBits:
		return // no tier announced a copy, or the count saturated
	default:
		nd.adapter -= oneTier
	}
	w.offloaded += count(offloadedOnly(nd)) - count(was)
	if nd.adapter&(inGPU|tierBits) == 0 {
		ix.unhold(w, at, r)
	}
}

// storedAgain records that the GPU holds one more copy of the node's block:
// its first, back from an offloading tier, or another, counted up to
// copyBits. A saturated count no longer tells when the last copy goes, so
// the block is then held until the engine is cleared (AllBlocksCleared, a
// gap in its events, the worker leaving).
func storedAgain(nd *node) {
	switch {
	case nd.adapter&inGPU == 0:
		nd.adapter |= inGPU
	case nd.adapter&copyBits != copyBits:
		nd.adapter += oneCopy
	}
}

// count is 1 for true, 0 for false.
func count(b bool) int {
	if b {
		return 1
	}
	return 0
}

// offloadedOnly reports whether an offloading tier holds the node's block
// and the GPU does not.
func offloadedOnly(nd *node) bool { return nd.adapter&inGPU == 0 && nd.adapter&tierBits != 0 }

// onGPU reports whether an event's medium is the GPU's: "GPU", or none,
// as servers that predate the field publish.
func onGPU(medium string) bool { return medium == "" || strings.EqualFold(medium, "GPU") }

// follows reports whether the engine applies the event, by its KV-cache
// group. A hybrid model's server publishes each group's blocks under the
// same hashes, and a sliding-window group evicts a prompt's early blocks
// that the full-attention group keeps, so an engine follows one group: a
// full-attention one (its blocks are the prompt's whole prefix), or,
// until one shows, the first group stored. Events that name no group (a
// single-group server before the field) are applied.
func (ix *Index) follows(w *engine, ev *kvevents.Event) bool {
	if !ev.HasGroup || ev.Kind == kvevents.AllBlocksCleared || ev.Group == w.group {
		return true
	}
	if ev.Kind != kvevents.BlockStored || ev.Group < 0 {
		return false
	}
	full := prefixKind(ev.SpecKind)
	if w.group >= 0 && (w.full || !full) {
		return false
	}
	ix.clearLocked(w) // the blocks of the group followed until now
	w.group, w.full = ev.Group, full
	return true
}

// prefixKind reports whether a KV-cache group of the kind keeps a prompt's
// every block: attention over the whole context. A server that names no
// kind is taken to.
func prefixKind(kind string) bool {
	switch kind {
	case "", "full_attention", "mla_attention", "sink_full_attention":
		return true
	}
	return false
}

// engineLocked returns the engine, followed from now on when new.
func (ix *Index) engineLocked(s src) *engine {
	es := ix.workers[s.id]
	for len(es) <= int(s.engine) {
		es = append(es, nil)
	}
	if es[s.engine] == nil {
		w := &engine{src: s, blocks: newTable(engineTableBits, false), group: -1}
		if n := len(ix.freeSlots); n > 0 {
			w.slot = ix.freeSlots[n-1]
			ix.freeSlots = ix.freeSlots[:n-1]
			ix.engines[w.slot] = w
		} else {
			w.slot = uint32(len(ix.engines))
			ix.engines = append(ix.engines, w)
		}
		es[s.engine] = w
	}
	ix.workers[s.id] = es
	return es[s.engine]
}

func (ix *Index) stored(w *engine, ev *kvevents.Event) {
	bs := ev.BlockSize
	if bs <= 0 || w.blockSize != 0 && bs != w.blockSize || len(ev.TokenIDs) != len(ev.Hashes)*bs {
		ix.dropped.Malformed++
		return
	}
	ix.sizeEngine(w, bs)
	adapter := ix.adapterOf(ev)
	key := seed(adapter, bs)
	if ev.HasParent {
		_, p := w.blocks.find(&ix.nodes, ev.Parent)
		if p == 0 {
			ix.dropped.Unchained += int64(len(ev.Hashes))
			return
		}
		key = ix.nodes.at(p).key
	}
	held, _ := ix.heldLocked(w.src.id)
	others := held - w.blocks.n // the bound is the worker's, over all its engines
	extra := ev.Extra
	var aid uint32 // the adapter's number, once a block is held under it
	named := false
	for i, h := range ev.Hashes {
		key = chain(key, ev.TokenIDs[i*bs:(i+1)*bs])
		if len(extra) > 0 && extra[0].Block == i {
			key = mix(key, extra[0].Hash())
			extra = extra[1:]
			ix.extraKeys = true
		}
		if at, old := w.blocks.find(&ix.nodes, h); old != 0 {
			nd := ix.nodes.at(old)
			if offloadedOnly(nd) {
				w.offloaded-- // on the GPU again, or replaced
			}
			if nd.key == key {
				storedAgain(nd)
				continue
			}
			ix.unhold(w, at, old)
			// The block replaced may be one this event stored (a hash
			// repeated in it), the last under the adapter's number.
			named = named && ix.adapters.blocks[aid] > 0
		}
		if others+w.blocks.n >= ix.maxPerWorker {
			ix.dropped.Full += int64(len(ev.Hashes) - i)
			break
		}
		if !named {
			if aid, named = ix.adapters.hold(adapter); !named {
				ix.dropped.Full += int64(len(ev.Hashes) - i)
				break
			}
		} else {
			ix.adapters.holdAgain(aid) // held since an earlier block of this event
		}
		ix.hold(w, h, key, aid)
	}
}

// adapterOf returns the name the event's blocks are filed under: its
// adapter's name, "" for the base model's. A server that sends lora_id but
// no lora_name (vLLM releases before the field) keys an adapter's blocks
// apart from the base model's all the same (the adapter is in its block
// hashes), so they are filed under a name made of the number (loraIDNames),
// which no request can name. The number a server gives an adapter depends
// on the order it loaded them in, so a request for the adapter does not
// find them either.
func (ix *Index) adapterOf(ev *kvevents.Event) string {
	if ev.LoraName != "" || !ev.HasLora {
		return ev.LoraName
	}
	return ix.loraIDs.name(ev.LoraID)
}

// hold records that the engine holds, under the server's hash h, the block
// keyed key, stored under adapter number aid: a new node, first in its
// key's chain.
func (ix *Index) hold(w *engine, h, key uint64, aid uint32) {
	r := ix.nodes.alloc()
	nd := ix.nodes.at(r)
	*nd = node{hash: h, key: key, eng: w.slot, adapter: aid | inGPU}
	w.blocks.insert(&ix.nodes, r)
	at, first := ix.keys.find(&ix.nodes, key)
	if first == 0 {
		ix.keys.insert(&ix.nodes, r)
		return
	}
	nd.next = first
	ix.nodes.at(first).prev = r
	ix.keys.set(at, r)
}

// unhold forgets node r, in slot at of the engine's table.
func (ix *Index) unhold(w *engine, at spot, r uint32) {
	w.blocks.remove(&ix.nodes, at)
	ix.unchain(r)
}

// unchain takes node r off its key's chain, and the key off the index with
// its last node, and frees the node.
func (ix *Index) unchain(r uint32) {
	nd := ix.nodes.at(r)
	if nd.next != 0 {
		ix.nodes.at(nd.next).prev = nd.prev
	}
	if nd.prev != 0 {
		ix.nodes.at(nd.prev).next = nd.next
	} else {
		at, _ := ix.keys.find(&ix.nodes, nd.key)
		if nd.next != 0 {
			ix.keys.set(at, nd.next)
		} else {
			ix.keys.remove(&ix.nodes, at)
		}
	}
	ix.adapters.drop(nd.adapter & adapterBits)
	ix.nodes.release(r)
}

// compact moves the nodes left in the slab's top chunk down, at most
// compactMoves of them in one call, and lets the top chunk go once it is
// empty, while the chunks below would stay at most half full: so the slab
// shrinks after pods leave or evict, with no pause longer than a few moves
// under the write lock, and does not shrink only to grow again. Every write
// ends with it.
func (ix *Index) compact() {
	s := &ix.nodes
	for moves := 0; len(s.chunks) > minChunks; {
		top := len(s.chunks) - 1
		if s.live*2 > top*chunkSize {
			return
		}
		base := uint32(top << chunkBits)
		for j := uint32(0); j < chunkSize && s.meta[top].live > 0; j++ {
			if moves == compactMoves {
				return
			}
			if !s.isFree(base + j) {
				ix.move(base + j)
				moves++
			}
		}
		s.dropTop()
	}
}

// Compact does one step of compact, as every write does: the subscriber
// calls it at a steady pace, so that the slab also shrinks in a pool that
// went idle after pods left.
func (ix *Index) Compact() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.compact()
}

// The slab keeps minChunks chunks (32 KiB) however empty, and compact
// moves at most compactMoves nodes in a call: 50 to 110 µs of the write
// lock in BenchmarkEventIndexMemory, against 0.7 to 4 ms for a batch whose
// store doubles a part of a table.
const (
	minChunks    = 2
	compactMoves = 128
)

// move puts node r's block in the lowest free node and frees r, so every
// table and chain that named r names the new node.
func (ix *Index) move(r uint32) {
	d := ix.nodes.alloc()
	nd := ix.nodes.at(d)
	*nd = *ix.nodes.at(r)
	w := ix.engines[nd.eng]
	at, _ := w.blocks.find(&ix.nodes, nd.hash)
	w.blocks.set(at, d)
	if nd.prev != 0 {
		ix.nodes.at(nd.prev).next = d
	} else {
		at, _ := ix.keys.find(&ix.nodes, nd.key)
		ix.keys.set(at, d)
	}
	if nd.next != 0 {
		ix.nodes.at(nd.next).prev = d
	}
	ix.nodes.release(r)
}

// Clear forgets everything the worker's engines hold.
func (ix *Index) Clear(id uint32) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.compact()
	for _, w := range ix.workers[id] {
		if w != nil {
			ix.clearLocked(w)
		}
	}
}

// ClearEngine forgets everything engine e of the worker holds, as when its
// events were interrupted: what it evicted meanwhile is unknown. The engine
// stays followed.
func (ix *Index) ClearEngine(id uint32, e int) {
	if e < 0 || e >= MaxEngines {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.compact()
	ix.clearLocked(ix.engineLocked(src{id: id, engine: uint32(e)}))
}

// Remove forgets the worker.
func (ix *Index) Remove(id uint32) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.compact()
	for _, w := range ix.workers[id] {
		if w != nil {
			ix.dropLocked(w)
		}
	}
	delete(ix.workers, id)
}

// RemoveEngine forgets engine e of the worker, and the worker with its last
// engine.
func (ix *Index) RemoveEngine(id uint32, e int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.compact()
	es := ix.workers[id]
	if e < 0 || e >= len(es) || es[e] == nil {
		return
	}
	ix.dropLocked(es[e])
	es[e] = nil
	for _, w := range es {
		if w != nil {
			return
		}
	}
	delete(ix.workers, id)
}

func (ix *Index) clearLocked(w *engine) {
	w.group, w.full, w.offloaded = -1, false, 0
	ix.sizeEngine(w, 0)
	if w.blocks.n == 0 {
		return
	}
	w.blocks.each(ix.unchain)
	w.blocks.reset()
}

// dropLocked forgets the engine and frees its slot.
func (ix *Index) dropLocked(w *engine) {
	ix.clearLocked(w)
	ix.engines[w.slot] = nil
	ix.freeSlots = append(ix.freeSlots, w.slot)
}

// Held returns how many blocks the worker's caches hold, as its events
// tell (over all its engines), and how many of them only an offloading
// tier holds.
func (ix *Index) Held(id uint32) (blocks, offloaded int) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.heldLocked(id)
}

// heldLocked is Held with the index's lock held.
func (ix *Index) heldLocked(id uint32) (blocks, offloaded int) {
	for _, w := range ix.workers[id] {
		if w != nil {
			blocks += w.blocks.n
			offloaded += w.offloaded
		}
	}
	return blocks, offloaded
}

// enginesLocked returns how many of the worker's engines are followed.
func (ix *Index) enginesLocked(id uint32) int {
	n := 0
	for _, w := range ix.workers[id] {
		if w != nil {
			n++
		}
	}
	return n
}

// SaltKeyed reports whether the servers' events key blocks by their extra
// keys (a cache salt, a multimodal input's hash, beyond the adapter), as
// seen once a block came with any. Until then a salted prompt's blocks may
// look like unsalted ones, and blocks of one image like another's.
func (ix *Index) SaltKeyed() bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.extraKeys
}

// sized is a block size some engines store blocks of: a lookup cuts the
// prompt into blocks of each.
type sized struct {
	tokens  int
	engines int
}

// sizeEngine sets the engine's block size to bs (0: none), keeping the
// count of engines by size.
func (ix *Index) sizeEngine(w *engine, bs int) {
	if w.blockSize == bs {
		return
	}
	if w.blockSize != 0 {
		i := slices.IndexFunc(ix.sizes, func(s sized) bool { return s.tokens == w.blockSize })
		ix.sizes[i].engines--
		if ix.sizes[i].engines == 0 {
			ix.sizes = slices.Delete(ix.sizes, i, i+1)
		}
	}
	w.blockSize = bs
	if bs == 0 {
		return
	}
	if i := slices.IndexFunc(ix.sizes, func(s sized) bool { return s.tokens == bs }); i >= 0 {
		ix.sizes[i].engines++
	} else {
		ix.sizes = append(ix.sizes, sized{tokens: bs, engines: 1})
	}
}

// Sized reports whether an engine has stored blocks since it was last
// cleared: before, no lookup can find anything.
func (ix *Index) Sized() bool {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.sizes) > 0
}

// Stats returns the blocks held over all workers and what was dropped.
func (ix *Index) Stats() (blocks int, dropped Dropped) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.nodes.live, ix.dropped
}

// Offloaded returns how many of the blocks held only an offloading tier
// holds, over every engine.
func (ix *Index) Offloaded() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	n := 0
	for _, w := range ix.engines {
		if w != nil {
			n += w.offloaded
		}
	}
	return n
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
// ("" for the base model), whose blocks the servers keep apart, and the
// tokens per block, so that the keys of servers of different block sizes
// never meet.
func seed(adapter string, blockSize int) uint64 {
	h := uint64(m2)
	for i := 0; i < len(adapter); i++ {
		h = mix(h, uint64(adapter[i]))
	}
	return mix(mix(h, uint64(len(adapter))), uint64(blockSize))
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
