package policy

import (
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
//   - every worker the prefix index knows to hold a prefix of the prompt,
//   - the prompt's homeChoices heaviest workers in its rendezvous order (the
//     home and where it overflows), found over the whole pool from a cached
//     array of the workers' stable keys,
//   - for an adapter, the workers it was most recently sent to,
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

// sample implements sampler.
func (c *cacheAware) sample(_ *engine, p *pick, all []*registry.Worker) []*registry.Worker {
	out := p.pool[:0]
	off := int(p.rand() % uint64(len(all)))
	for i := range sampleSize {
		out = append(out, all[(off+i)%len(all)])
	}
	c.hash(p)
	for _, m := range p.matches {
		out = appendWorker(out, c.workers.get(m.Worker))
	}
	if c.cfg.HomeBlocks > 0 {
		if key, blocks := c.homeKey(p); blocks > 0 {
			for _, i := range c.keys.heaviest(all, key) {
				if i >= 0 {
					out = appendWorker(out, all[i])
				}
			}
		}
	}
	for _, id := range c.lora.sentTo(p) {
		out = appendWorker(out, c.workers.get(id))
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

// stableKeys caches the stable keys of one candidate list, the registry's
// snapshot: it changes only when the pool does, so a pick over a large
// pool ranks every worker for the home over a dense array instead of
// reading each worker.
type stableKeys struct{ cur atomic.Pointer[keyArray] }

type keyArray struct {
	ws   []*registry.Worker // the list the keys are of; held so its address names it
	keys []uint64
}

// of returns the stable keys of ws, index for index.
func (s *stableKeys) of(ws []*registry.Worker) []uint64 {
	if k := s.cur.Load(); k != nil && sameList(k.ws, ws) {
		return k.keys
	}
	k := &keyArray{ws: ws, keys: make([]uint64, len(ws))}
	for i, w := range ws {
		if w != nil {
			k.keys[i] = w.StableKey()
		}
	}
	s.cur.Store(k)
	return k.keys
}

// heaviest returns the indices in ws of the homeChoices workers with the
// highest rendezvous weight for key, the heaviest first; -1 fills the
// places of a smaller pool.
func (s *stableKeys) heaviest(ws []*registry.Worker, key uint64) [homeChoices]int {
	var idx [homeChoices]int
	var wt [homeChoices]uint64
	for i := range idx {
		idx[i] = -1
	}
	for i, k := range s.of(ws) {
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
