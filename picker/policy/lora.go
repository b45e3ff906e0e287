package policy

import (
	"sync"

	"github.com/inferpick/inferpick/picker/registry"
)

// adapterState is where a worker stands with the adapter a request names.
type adapterState uint8

const (
	adapterNone     adapterState = iota // no adapter involved: a base model, or no LoRA on the worker
	adapterResident                     // running or waiting there, or recently sent there
	adapterFree                         // not there, and a batch has room for one more adapter
	adapterFull                         // not there, and every adapter slot is taken
)

// Sizes of the tables of recent decisions: each worker remembers its
// loraRecent most recently sent adapters, and each of loraAdapterRows rows
// (an adapter's by its hash modulo the rows) the loraWhere workers an
// adapter was most recently sent to.
const (
	loraRecent      = 8
	loraAdapterRows = 1024
	loraWhere       = 4
)

// loraAffinity tracks where adapters are loaded: the model servers' own
// report (vllm:lora_requests_info: adapters of running and waiting
// requests) and the picker's recent decisions. An adapter sent to a worker
// is taken as loading there, and then as loaded while it stays among the
// max_lora adapters most recently sent there: vLLM keeps an idle adapter
// loaded until a newer one evicts the least recently used, and its metric
// lists only the adapters in use.
type loraAffinity struct {
	// rows are the workers' recently sent adapters, a row of its own for
	// each worker, made when it joins the registry and dropped when it
	// leaves.
	rows perWorker[loraRow]
	// where is the other direction, for picks that sample a large pool
	// (sample.go): by adapter (its hash modulo the rows), the workers it
	// was most recently sent to. Two adapters sharing a row overwrite each
	// other, which only loses hints; a worker that left stays named until
	// newer ones push it out, and is then no candidate.
	where [loraAdapterRows]adapterRow
}

// newLoRAAffinity returns an affinity table that follows reg's workers.
func newLoRAAffinity(reg *registry.Registry) *loraAffinity {
	a := &loraAffinity{}
	a.rows.follow(reg)
	return a
}

// adapterRow is one adapter's most recent workers, most recent first.
type adapterRow struct {
	mu      sync.Mutex
	adapter uint64
	n       int
	workers [loraWhere]uint32
}

// loraRow is one worker's recently sent adapters, most recent first, to
// the run of its model server counted restarts (registry.Metrics.Restarts):
// a restarted server holds none of them.
type loraRow struct {
	mu       sync.Mutex
	restarts uint32
	n        int
	recent   [loraRecent]uint64 // hashes of the adapter names
}

// adapterOf sets the pick's adapter key: the hash of the requested model,
// computed once per pick.
func adapterOf(p *pick) uint64 {
	if !p.adapterSet {
		p.adapterSet = true
		h := uint64(14695981039346656037)
		for i := 0; i < len(p.req.Model); i++ {
			h ^= uint64(p.req.Model[i])
			h *= 1099511628211
		}
		p.adapterHash = h
	}
	return p.adapterHash
}

// sentRecently reports whether the adapter is among the slots most
// recently sent adapters of w, since its server's restarts-th restart. A
// worker whose joining has not settled yet has been sent none.
func (a *loraAffinity) sentRecently(w *registry.Worker, restarts uint32, h uint64, slots int) bool {
	r := a.rows.of(w)
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.restarts != restarts {
		return false
	}
	for i := range min(r.n, slots, loraRecent) {
		if r.recent[i] == h {
			return true
		}
	}
	return false
}

// state classifies cd for the pick's requested model. A worker that lists
// the model as a base model, or reports no LoRA state at all, is
// adapterNone. It reads one scrape of the worker: the metrics the pick
// admitted it with, else (they are stale) the newest, of which only the
// model list and the adapter slots count; a scrape landing mid-pick is
// not mixed in.
func (a *loraAffinity) state(p *pick, cd *candidate) adapterState {
	model := p.req.Model
	if model == "" {
		return adapterNone
	}
	m, fresh := cd.metrics, cd.metrics != nil
	if !fresh {
		m = cd.w.Metrics()
	}
	if m == nil || m.LoRA == nil || m.Served.ServesBase(model) {
		return adapterNone
	}
	lora := m.LoRA
	if fresh && lora.Has(model) {
		return adapterResident
	}
	if a.sentRecently(cd.w, m.Restarts, adapterOf(p), max(lora.Max, 1)) {
		return adapterResident
	}
	if lora.Max <= 0 || len(lora.Active) < lora.Max {
		return adapterFree
	}
	return adapterFull
}

// cost is the adapter's part of cd's cost in units of load: nothing where
// it is loaded, loadCost where it must be loaded into a free slot, twice
// that where it must also wait for a slot.
func (a *loraAffinity) cost(p *pick, cd *candidate, loadCost float64) float64 {
	switch a.state(p, cd) {
	case adapterFree:
		return loadCost
	case adapterFull:
		return 2 * loadCost
	}
	return 0
}

// score is the adapter affinity in [0,1] for the weighted scorer: 1 where
// loaded or no adapter is involved, 0.5 with a free slot, 0 when full.
func (a *loraAffinity) score(p *pick, cd *candidate) float64 {
	switch a.state(p, cd) {
	case adapterFree:
		return 0.5
	case adapterFull:
		return 0
	}
	return 1
}

// record remembers that the pick's adapter was sent to w: it becomes
// w's most recently sent adapter, unless w's joining has not settled yet
// (it has no row). It never allocates.
func (a *loraAffinity) record(p *pick, w *registry.Worker) {
	model := p.req.Model
	if model == "" {
		return
	}
	m := w.Metrics()
	if m == nil || m.LoRA == nil || m.Served.ServesBase(model) {
		return
	}
	h := adapterOf(p)
	if r := a.rows.of(w); r != nil {
		r.mu.Lock()
		if r.restarts != m.Restarts {
			r.restarts, r.n = m.Restarts, 0
		}
		r.n = toFront(r.recent[:], r.n, h)
		r.mu.Unlock()
	}
	a.where[h%loraAdapterRows].add(h, w.ID())
}

func (r *adapterRow) add(adapter uint64, id uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.adapter != adapter {
		r.adapter, r.n = adapter, 0
	}
	r.n = toFront(r.workers[:], r.n, id)
}

// toFront makes v the first of the n values of list, most recent first:
// moved there when among them, else added, dropping the last when list is
// full. It returns the new count.
func toFront[T comparable](list []T, n int, v T) int {
	i := 0
	for i < n && list[i] != v {
		i++
	}
	if i == n {
		n = min(n+1, len(list))
		i = n - 1
	}
	copy(list[1:i+1], list[:i])
	list[0] = v
	return n
}

// sentTo returns the IDs of the workers the pick's adapter was most
// recently sent to; 0 fills the places of fewer.
func (a *loraAffinity) sentTo(p *pick) [loraWhere]uint32 {
	var out [loraWhere]uint32
	if p.req.Model == "" {
		return out
	}
	h := adapterOf(p)
	r := &a.where[h%loraAdapterRows]
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.adapter == h {
		copy(out[:], r.workers[:r.n])
	}
	return out
}

// chose records the primary in the prefix index and, for an adapter, in
// the LoRA decision table.
func (c *cacheAware) chose(e *engine, p *pick, primary *registry.Worker) {
	c.indexed.chose(e, p, primary)
	c.lora.record(p, primary)
}

// chose records the primary in the prefix index, for an adapter in the
// LoRA decision table, and for a cold prompt in the no-hit stamps.
func (s *weightedScorer) chose(e *engine, p *pick, primary *registry.Worker) {
	s.indexed.chose(e, p, primary)
	s.lora.record(p, primary)
	if s.noHit != nil {
		s.noHit.chose(p, primary)
	}
}
