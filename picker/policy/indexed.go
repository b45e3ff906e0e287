package policy

import (
	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
)

// indexed is the part of a policy that keeps a prefix index of its own
// decisions. The index follows the registry: a worker's entries vanish when
// it leaves.
type indexed struct {
	ix      *prefix.Index
	cal     *calibrator
	workers *workerSet               // the index's workers by ID (sample.go)
	matched func(matched, total int) // nil: nobody asked
}

func newIndexed(cfg IndexConfig, reg *registry.Registry, matched func(matched, total int)) indexed {
	ix := prefix.New(
		prefix.WithDefaultCapacity(cfg.DefaultCapacityBlocks),
		prefix.WithMaxHolders(cfg.MaxHolders),
		prefix.WithMaxBlocks(cfg.MaxBlocks),
	)
	cal := newCalibrator(reg)
	ws := &workerSet{}
	reg.AddListener(indexListener{ix, ws})
	return indexed{ix: ix, cal: cal, workers: ws, matched: matched}
}

// indexListener keeps the index's worker set equal to the registry's.
type indexListener struct {
	ix      *prefix.Index
	workers *workerSet
}

func (l indexListener) WorkerAdded(w *registry.Worker) {
	l.ix.AddWorker(w.ID())
	l.workers.add(w)
}

func (l indexListener) WorkerRemoved(w *registry.Worker) {
	l.workers.remove(w)
	l.ix.RemoveWorker(w.ID())
}

// hash hashes the prompt and looks it up in the index, once per pick.
func (x indexed) hash(p *pick) {
	if p.hashed {
		return
	}
	p.hashed = true
	x.hashes(p)
	p.blocks = len(p.hashes)
	p.matches = x.ix.Match(p.hashes, &p.scratch)
	if x.matched != nil && p.blocks > 0 {
		best := 0
		for _, m := range p.matches {
			best = max(best, m.Blocks)
		}
		x.matched(best, p.blocks)
	}
}

// hashes sets p.hashes to the prompt's hashes, hashing it unless the
// request keeps them from an earlier call (Request.Hashes).
func (x indexed) hashes(p *pick) {
	h := p.req.Hashes
	if h == nil {
		h = &p.own
		h.Reset()
	}
	p.hashes = x.sums(h, p.req)
}

// sums returns the prompt's hashes kept in h, hashing it into h first
// unless h holds this index's.
func (x indexed) sums(h *Hashes, req *Request) []uint64 {
	if h.ix != x.ix {
		h.ix, h.sums = x.ix, x.ix.Hashes(h.sums, req.Model, req.CacheSalt, req.Prompt)
	}
	return h.sums
}

// match sets each candidate's matched blocks.
func (x indexed) match(p *pick) {
	for i := range p.cands {
		x.cal.refresh(p.cands[i].w)
	}
	x.hash(p)
	defer x.shared(p)
	ms := p.matches
	switch {
	case len(ms) == 0:
		return
	case len(ms) <= 8:
		for i := range p.cands {
			id := p.cands[i].w.ID()
			for _, m := range ms {
				if m.Worker == id {
					p.cands[i].matched = m.Blocks
					break
				}
			}
		}
	default:
		clear(p.matched)
		for _, m := range ms {
			p.matched[m.Worker] = m.Blocks
		}
		for i := range p.cands {
			p.cands[i].matched = p.matched[p.cands[i].w.ID()]
		}
	}
}

// shared raises each candidate's matched blocks to what the servers' own
// account says it holds.
func (x indexed) shared(p *pick) {
	sh := p.req.Shared
	if sh == nil {
		return
	}
	for _, h := range sh.Holds {
		n := int(h.Share * float64(p.blocks))
		for i := range p.cands {
			if cd := &p.cands[i]; cd.w.ID() == h.Worker {
				cd.matched = max(cd.matched, min(n, p.blocks))
				break
			}
		}
	}
}

// knows reports whether the index places the prompt well enough that the
// model servers' account could change little: some worker holds all of it
// but fewer than unknownBlocks full blocks, or it is shorter than that.
// A prefix every prompt shares (a system prompt) does not make a prompt
// known: a conversation another replica routed is known here only once its
// own turns are. Nor does a worker parked while its pod is unready, or one
// the pick's label filters leave out: the servers that may take the prompt
// are worth asking.
func (x indexed) knows(p *pick, labels labelMatcher) bool {
	x.hashes(p)
	if len(p.hashes) < unknownBlocks {
		return true
	}
	for _, m := range x.ix.Match(p.hashes, &p.scratch) {
		if len(p.hashes)-m.Blocks < unknownBlocks {
			if w := x.workers.get(m.Worker); w != nil && w.Live() && labels.admits(w.Labels()) {
				return true
			}
		}
	}
	return false
}

// unknownBlocks is the prompt's tail, in blocks (1 KiB, some 250 tokens),
// that no worker is known to hold, from which asking the model servers is
// worth their answer's latency: less than that is one message's prefill at
// most, wherever it goes.
const unknownBlocks = 16

// chose records that the primary now holds the prompt, and, in the
// request's Hashes, what it held before (Held).
func (x indexed) chose(_ *engine, p *pick, primary *registry.Worker) {
	if h := p.req.Hashes; h != nil && p.hashed && h.ix == x.ix {
		h.primary, h.primaryHad, h.picked = primary.ID(), 0, true
		for i := range p.cands {
			if p.cands[i].w == primary {
				h.primaryHad = p.cands[i].matched
				break
			}
		}
	}
	x.ix.Insert(primary.ID(), capacityBlocks(primary), p.hashes)
	n := 0
	for _, seg := range p.req.Prompt {
		n += len(seg)
	}
	cached := 0
	if len(p.cands) > 0 && p.cands[0].w == primary { // cheapest put the primary first
		cached = p.cands[0].matched * prefix.BlockSize
	}
	x.cal.sent(primary, n, cached)
}

// Observe records that served, not the primary, holds the prompt now.
func (x indexed) Observe(req *Request, served *registry.Worker) {
	if req == nil || served == nil {
		return
	}
	h := req.Hashes
	if h == nil {
		h = &Hashes{}
	}
	x.ix.Insert(served.ID(), capacityBlocks(served), x.sums(h, req))
}

// Knows reports whether the policy's index knows the prompt (indexed.knows);
// a policy without an index knows every prompt, having nothing to learn. A
// caller that can ask the model servers where a prompt is cached asks only
// when it is not known.
func (e *engine) Knows(req *Request) bool {
	k, ok := e.ranker.(interface {
		knows(*pick, labelMatcher) bool
	})
	if !ok || req == nil {
		return true
	}
	p := e.pool.Get().(*pick)
	defer func() {
		p.req, p.hashes = nil, nil
		e.pool.Put(p)
	}()
	p.req = req
	return k.knows(p, e.stageLabels(req))
}

// held returns the prompt's leading blocks w holds: what the request's
// last pick found there when w was its primary, else what the index and
// the servers' account say now.
func (x indexed) held(p *pick, w *registry.Worker) int {
	if h := p.req.Hashes; h != nil && h.picked && h.ix == x.ix && h.primary == w.ID() {
		return h.primaryHad
	}
	x.hashes(p)
	blocks := 0
	for _, m := range x.ix.Match(p.hashes, &p.scratch) {
		if m.Worker == w.ID() {
			blocks = m.Blocks
			break
		}
	}
	if sh := p.req.Shared; sh != nil {
		for _, h := range sh.Holds {
			if h.Worker == w.ID() {
				blocks = max(blocks, min(int(h.Share*float64(len(p.hashes))), len(p.hashes)))
			}
		}
	}
	return blocks
}

// Held implements Policy: the bytes of the request's prompt, from its
// start, that w holds (indexed.held), in whole blocks; 0 for a policy
// that keeps no index.
func (e *engine) Held(req *Request, w *registry.Worker) int {
	k, ok := e.ranker.(interface {
		held(*pick, *registry.Worker) int
	})
	if !ok || req == nil || w == nil {
		return 0
	}
	p := e.pool.Get().(*pick)
	defer func() {
		p.req, p.hashes = nil, nil
		e.pool.Put(p)
	}()
	p.req = req
	return k.held(p, w) * prefix.BlockSize
}

// indexStats is implemented by rankers that keep a prefix index.
type indexStats interface{ stats() prefix.Stats }

func (x indexed) stats() prefix.Stats { return x.ix.Stats() }

// IndexStats returns the policy's prefix-index statistics (blocks held,
// lookups, hit ratio), and false for policies that keep no index.
func (e *engine) IndexStats() (prefix.Stats, bool) {
	if s, ok := e.ranker.(indexStats); ok {
		return s.stats(), true
	}
	return prefix.Stats{}, false
}
