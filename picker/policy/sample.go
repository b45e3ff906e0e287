package policy

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
)

// A pick over a large pool does not look at every worker: measuring the
// load of each and costing it grows with the pool, while the choice it
// makes depends on few of them. Over more than sampleAbove candidates a
// cache-aware pick looks at
//
//   - sampleSize workers at a random place of the candidate list (the best
//     of d random choices spreads load almost as evenly as the best of all:
//     Mitzenmacher 2001),
//   - every candidate the prefix index knows to hold a prefix of the prompt,
//   - the prompt's homeChoices heaviest candidates in its rendezvous order
//     (the home and where it overflows), found over the whole list from a
//     cached array of the workers' stable keys,
//   - for an adapter, the candidates it was most recently sent to,
//
// and costs those alone. When none of them can take the request (all
// saturated, or none serves the model), the pick looks at every worker, so
// sampling never refuses a request a full scan would have placed.
//
// What sampling changes: the least loaded worker of the pool may be missed
// for one within the sample's best, and the home's load bound is judged
// against the sample's mean load rather than the pool's. A pick whose
// candidates the caller narrowed (Request.Subset) looks at every one.
const (
	sampleAbove = 128
	sampleSize  = 32
	homeChoices = 4
)

// sampler is implemented by rankers that can pick over part of a large
// pool.
type sampler interface {
	// sample returns the candidates a pick over all looks at.
	sample(e *engine, p *pick, all []*registry.Worker) []*registry.Worker
}

// sample implements sampler. What the index and the LoRA table name is
// taken only when it is one of all: over a role's list (the pods that
// decode, or those that prefill) a worker of the other role may hold the
// prompt or have served the adapter, and a pick returns its candidates
// alone.
func (c *cacheAware) sample(_ *engine, p *pick, all []*registry.Worker) []*registry.Worker {
	out := p.pool[:0]
	off := int(p.rand() % uint64(len(all)))
	for i := range sampleSize {
		out = append(out, all[(off+i)%len(all)])
	}
	l := c.lists.of(all)
	c.hash(p)
	for _, m := range p.matches {
		out = appendWorker(out, l.get(m.Worker))
	}
	if c.cfg.HomeBlocks > 0 {
		if key, blocks := c.homeKey(p); blocks > 0 {
			for _, i := range l.heaviest(key) {
				if i >= 0 {
					out = appendWorker(out, all[i])
				}
			}
		}
	}
	for _, id := range c.lora.sentTo(p) {
		out = appendWorker(out, l.get(id))
	}
	p.pool = out
	return out
}

// appendWorker appends w to ws unless it is nil or there already.
func appendWorker(ws []*registry.Worker, w *registry.Worker) []*registry.Worker {
	if w == nil || contains(ws, w) {
		return ws
	}
	return append(ws, w)
}

// workerSet finds a live worker by its ID (what the prefix index and the
// LoRA table name workers by). It follows the registry.
type workerSet struct{ m sync.Map } // uint32 → *registry.Worker

func (s *workerSet) add(w *registry.Worker) { s.m.Store(w.ID(), w) }

func (s *workerSet) remove(w *registry.Worker) { s.m.Delete(w.ID()) }

// get returns the worker with id, or nil.
func (s *workerSet) get(id uint32) *registry.Worker {
	if id == 0 {
		return nil
	}
	w, ok := s.m.Load(id)
	if !ok {
		return nil
	}
	return w.(*registry.Worker)
}

// candidateLists keeps what a sample needs of the candidate lists it is
// given, each a list that never changes (the registry's snapshot, or its
// lists of the pods that decode and of those that prefill): the workers'
// stable keys, so that a pick over a large pool ranks every worker for the
// home over a dense array instead of reading each worker, and their IDs,
// to tell which worker the index names is a candidate. It holds two lists,
// a decode pick's and a prefill pick's, so that picks alternating between
// them find both; a list of a new snapshot takes the place of each in
// turn.
type candidateLists struct {
	ways [2]atomic.Pointer[listInfo]
	next atomic.Uint32
}

// listInfo is what candidateLists keeps of one list.
type listInfo struct {
	ws   []*registry.Worker // the list; held so its address names it
	keys []uint64           // the workers' stable keys, index for index
	ids  []member           // the workers by ID
}

// member is a worker's ID and its index in the list.
type member struct {
	id uint32
	i  int32
}

// of returns what is kept of ws, made on first use.
func (c *candidateLists) of(ws []*registry.Worker) *listInfo {
	for i := range c.ways {
		if l := c.ways[i].Load(); l != nil && sameList(l.ws, ws) {
			return l
		}
	}
	l := &listInfo{ws: ws, keys: make([]uint64, len(ws)), ids: make([]member, 0, len(ws))}
	for i, w := range ws {
		if w != nil {
			l.keys[i] = w.StableKey()
			l.ids = append(l.ids, member{id: w.ID(), i: int32(i)})
		}
	}
	slices.SortFunc(l.ids, func(a, b member) int { return cmp.Compare(a.id, b.id) })
	c.ways[c.next.Add(1)%uint32(len(c.ways))].Store(l)
	return l
}

// get returns the worker of the list with id, or nil.
func (l *listInfo) get(id uint32) *registry.Worker {
	i, ok := slices.BinarySearchFunc(l.ids, id, func(m member, id uint32) int { return cmp.Compare(m.id, id) })
	if !ok {
		return nil
	}
	return l.ws[l.ids[i].i]
}

// heaviest returns the indices in the list of the homeChoices workers with the
// highest rendezvous weight for key, the heaviest first; -1 fills the
// places of a smaller pool.
func (l *listInfo) heaviest(key uint64) [homeChoices]int {
	var idx [homeChoices]int
	var wt [homeChoices]uint64
	for i := range idx {
		idx[i] = -1
	}
	for i, k := range l.keys {
		h := prefix.Rendezvous(key, k)
		if idx[homeChoices-1] >= 0 && h <= wt[homeChoices-1] {
			continue
		}
		j := homeChoices - 1
		for j > 0 && (idx[j-1] < 0 || h > wt[j-1]) {
			idx[j], wt[j] = idx[j-1], wt[j-1]
			j--
		}
		idx[j], wt[j] = i, h
	}
	return idx
}
