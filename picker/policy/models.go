package policy

import (
	"sync/atomic"

	"github.com/inferpick/inferpick/picker/registry"
)

// served is how a worker stands to a requested model.
type served uint8

const (
	servesAny     served = iota // no filtering: every live worker is a candidate
	servesModel                 // it lists the model, or, with an incomplete list, the base of that adapter
	servesUnknown               // it has not listed all its models
	servesNot                   // its complete list lacks the model
)

// modelFilter keeps the candidates that serve the requested model. A
// worker serves a model it lists as a base or an adapter (from /v1/models
// or the model_name of its metrics). vLLM answers a request for an adapter
// it has not registered with 404, so a worker whose complete list lacks an
// adapter does not serve it, even where it lists the adapter's base; a
// worker whose list is incomplete (metrics only) serves the adapter when it
// lists its base model, as some worker's /v1/models gives it. When some
// worker serves the model, the candidates are those and the workers that
// have reported no models yet (not scraped yet, or their scrapes fail):
// nothing says they do not serve it, and dropping them would shorten the
// fallback list at start and whenever a server's pages fail. Else the
// candidates are the workers whose lists are incomplete (nothing reported
// yet, or metrics only); else no worker serves the model.
type modelFilter struct {
	model  string
	parent string // the adapter's base model, when some worker reports it
	want   served
}

// newModelFilter looks at the live candidates' model lists. It fails with
// ErrModelNotServed when every one has a complete list without the model.
// It stops at the first worker that lists the model, the common case. An
// adapter's base model is also looked for in pool, the whole pool when the
// candidates are a part of it (a subset hint): the one worker that has
// loaded the adapter may lie outside the part.
func newModelFilter(model string, candidates, pool []*registry.Worker) (modelFilter, error) {
	f := modelFilter{model: model}
	if model == "" {
		return f, nil
	}
	unknown, known := 0, 0
	for _, w := range candidates {
		if w == nil || !w.Live() {
			continue
		}
		s := servedOf(w)
		if s.Serves(model) {
			f.want = servesModel
			f.parent, _ = s.Parent(model)
			return f, nil
		}
		if s == nil || !s.Complete {
			unknown++
		} else {
			known++
		}
	}
	if known == 0 {
		return f, nil // nobody has listed its models: no filtering
	}
	// No candidate lists the model itself. An adapter that a worker outside
	// them lists (a subset hint) is served by the candidates whose
	// incomplete lists give its base model.
	f.parent = parentOf(model, pool)
	if f.parent != "" {
		for _, w := range candidates {
			if w != nil && w.Live() && f.class(servedOf(w)) == servesModel {
				f.want = servesModel
				return f, nil
			}
		}
	}
	if unknown > 0 {
		f.want = servesUnknown
		return f, nil
	}
	return f, ErrModelNotServed
}

// Served reports whether some worker of ws may serve model: one lists it
// (or the base model of that adapter), one has not listed all its models,
// or none has listed any.
func Served(model string, ws []*registry.Worker) bool {
	_, err := newModelFilter(model, ws, nil)
	return err == nil
}

// parentOf returns the base model of adapter model as the first live worker
// of ws that reports it gives it, or "".
func parentOf(model string, ws []*registry.Worker) string {
	for _, w := range ws {
		if w != nil && w.Live() {
			if p, ok := servedOf(w).Parent(model); ok {
				return p
			}
		}
	}
	return ""
}

// admits reports whether w stays a candidate.
func (f *modelFilter) admits(w *registry.Worker) bool {
	if f.want == servesAny {
		return true
	}
	s := servedOf(w)
	if s == nil {
		return true // it has said nothing either way
	}
	return f.class(s) == f.want
}

func (f *modelFilter) class(s *registry.Served) served {
	switch {
	case s.Serves(f.model):
		return servesModel
	case s == nil || !s.Complete:
		if f.parent != "" && s.ServesBase(f.parent) {
			return servesModel // its list may leave out the adapter
		}
		return servesUnknown
	}
	return servesNot
}

// servedOf returns w's model lists, of any age: they are configuration.
func servedOf(w *registry.Worker) *registry.Served {
	if m := w.Metrics(); m != nil {
		return m.Served
	}
	return nil
}

// filterCache keeps the model filters of recent picks: building one may
// read every worker's model list (until one lists the model; all of them
// while none has reported), and its outcome holds as long as the candidate
// list and every model list do (registry.ServedEpoch). A slot per model
// (its hash modulo the slots) holds two filters, so that a model's decode
// and prefill picks, over two lists, each find theirs; a new one takes the
// place of a stale filter of its list and model, or of each in turn.
type filterCache struct {
	slots [filterSlots]filterSlot
}

const filterSlots = 8

type filterSlot struct {
	ways [2]atomic.Pointer[cachedFilter]
	next atomic.Uint32
}

type cachedFilter struct {
	ws     []*registry.Worker // the candidate list; held so its address names it
	epoch  uint64
	filter modelFilter
	err    error
}

// sameList reports whether a and b are the same non-empty list (one array,
// one length), as a cache keyed by a list that never changes, such as the
// registry's snapshot, recognises it.
func sameList(a, b []*registry.Worker) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}

// get returns newModelFilter(model, ws), from the cache when it holds.
// ws must be a list that never changes, such as the registry's snapshot.
func (c *filterCache) get(model string, ws []*registry.Worker) (modelFilter, error) {
	if model == "" || len(ws) == 0 {
		return newModelFilter(model, ws, nil)
	}
	epoch := registry.ServedEpoch() // before the lists are read
	h := uint32(2166136261)
	for i := 0; i < len(model); i++ {
		h = (h ^ uint32(model[i])) * 16777619
	}
	slot := &c.slots[h%filterSlots]
	way := -1
	for i := range slot.ways {
		e := slot.ways[i].Load()
		switch {
		case e == nil || e.filter.model == model && sameList(e.ws, ws) && e.epoch != epoch:
			way = i
		case e.epoch == epoch && e.filter.model == model && sameList(e.ws, ws):
			return e.filter, e.err
		}
	}
	if way < 0 {
		way = int(slot.next.Add(1) % uint32(len(slot.ways)))
	}
	f, err := newModelFilter(model, ws, nil)
	slot.ways[way].Store(&cachedFilter{ws: ws, epoch: epoch, filter: f, err: err})
	return f, err
}
