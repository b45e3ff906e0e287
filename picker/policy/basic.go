package policy

import "sync"

// leastLoad picks the worker with the fewest requests in flight.
type leastLoad struct{}

func (leastLoad) rank(_ *engine, p *pick) {
	for i := range p.cands {
		p.cands[i].cost = float64(p.cands[i].w.InFlight())
	}
}

// roundRobin walks each model's candidates in turn: a pick goes to the
// candidate whose ID follows, in cyclic order, the ID of the worker the
// model's last pick went to. Turns are kept per model (up to maxTurns
// models, the rest sharing one), so models whose requests alternate each
// still reach all their pods, and a candidate set that changes between
// picks (a pod saturated, a subset hint) keeps the order.
type roundRobin struct {
	mu   sync.Mutex
	last map[string]uint32 // by model: the ID of the worker picked last
}

const maxTurns = 256

func (r *roundRobin) rank(_ *engine, p *pick) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]uint32{}
	}
	model := p.req.Model
	last, ok := r.last[model]
	if !ok && len(r.last) >= maxTurns {
		model = ""
		last = r.last[model]
	}
	next, first := uint32(0), true
	for i := range p.cands {
		// How far the ID lies after last, cyclically: the nearest is next.
		d := p.cands[i].w.ID() - last - 1
		p.cands[i].cost = float64(d)
		if first || d < next {
			next, first = d, false
		}
	}
	r.last[model] = last + 1 + next
}

// random picks uniformly: every cost is equal and the random tie-break
// decides.
type random struct{}

func (random) rank(*engine, *pick) {}

// powerOfTwo draws two distinct candidates and prefers the one with fewer
// requests in flight; the others follow in random order.
type powerOfTwo struct{}

func (powerOfTwo) rank(_ *engine, p *pick) {
	m := uint64(len(p.cands))
	for i := range p.cands {
		p.cands[i].cost = 2
	}
	if m == 1 {
		return
	}
	a := p.rand() % m
	b := p.rand() % (m - 1)
	if b >= a {
		b++
	}
	ca, cb := &p.cands[a], &p.cands[b]
	la, lb := ca.w.InFlight(), cb.w.InFlight()
	if lb < la || (lb == la && cb.tie < ca.tie) {
		ca, cb = cb, ca
	}
	ca.cost, cb.cost = 0, 1
}
