package policy

import (
	"sync/atomic"

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

// loraMemoSlots is the size of the table of recent decisions: a fixed
// table, so it costs the same whatever the number of adapters and workers.
// Two (worker, adapter) pairs that share a slot overwrite each other, which
// only loses a hint.
const loraMemoSlots = 4096

// loraAffinity tracks where adapters are loaded: the model servers' own
// report (vllm:lora_requests_info: adapters of running and waiting
// requests) and the picker's recent decisions. An adapter sent to a worker
// is taken as loaded or loading there until a scrape taken after that
// decision leaves it out.
type loraAffinity struct {
	memo [loraMemoSlots]atomic.Pointer[loraDecision]
}

// loraDecision is one remembered (worker, adapter) pair and when the last
// request of that adapter was sent there.
type loraDecision struct {
	worker uint32
	name   string
	at     atomic.Int64 // Unix nanoseconds
}

// adapterOf sets the pick's adapter key: the hash of the requested model,
// computed once per pick.
func adapterOf(p *pick) {
	if p.adapterSet {
		return
	}
	p.adapterSet = true
	h := uint64(14695981039346656037)
	for i := 0; i < len(p.req.Model); i++ {
		h ^= uint64(p.req.Model[i])
		h *= 1099511628211
	}
	p.adapterHash = h
}

func (a *loraAffinity) slot(p *pick, w *registry.Worker) *atomic.Pointer[loraDecision] {
	h := p.adapterHash ^ uint64(w.ID())*0x9e3779b97f4a7c15
	h ^= h >> 29
	return &a.memo[h%loraMemoSlots]
}

// state classifies cd for the pick's requested model. A worker that lists
// the model as a base model, or reports no LoRA state at all, is
// adapterNone.
func (a *loraAffinity) state(p *pick, cd *candidate) adapterState {
	model := p.req.Model
	if model == "" {
		return adapterNone
	}
	raw := cd.w.Metrics()
	if raw == nil || raw.LoRA == nil || raw.Served.ServesBase(model) {
		return adapterNone
	}
	adapterOf(p)
	if cd.metrics != nil && cd.metrics.LoRA.Has(model) {
		return adapterResident
	}
	if d := a.slot(p, cd.w).Load(); d != nil && d.worker == cd.w.ID() && d.name == model &&
		raw.Scraped.UnixNano() <= d.at.Load() {
		return adapterResident
	}
	lora := raw.LoRA
	if cd.metrics != nil {
		lora = cd.metrics.LoRA
	}
	if lora == nil || lora.Max <= 0 || len(lora.Active) < lora.Max {
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

// record remembers that the pick's adapter was sent to w at now (Unix
// nanoseconds). Sending the same adapter to the same worker again only
// moves the time: no allocation in steady state.
func (a *loraAffinity) record(p *pick, w *registry.Worker, now int64) {
	model := p.req.Model
	if model == "" {
		return
	}
	if m := w.Metrics(); m == nil || m.LoRA == nil || m.Served.ServesBase(model) {
		return
	}
	adapterOf(p)
	s := a.slot(p, w)
	if d := s.Load(); d != nil && d.worker == w.ID() && d.name == model {
		d.at.Store(now)
		return
	}
	d := &loraDecision{worker: w.ID(), name: model}
	d.at.Store(now)
	s.Store(d)
}

// chose records the primary in the prefix index and, for an adapter, in
// the LoRA decision table.
func (c *cacheAware) chose(e *engine, p *pick, primary *registry.Worker) {
	c.indexed.chose(e, p, primary)
	c.lora.record(p, primary, e.now().UnixNano())
}

// chose records the primary in the prefix index and, for an adapter, in
// the LoRA decision table.
func (s *weightedScorer) chose(e *engine, p *pick, primary *registry.Worker) {
	s.indexed.chose(e, p, primary)
	s.lora.record(p, primary, e.now().UnixNano())
}
