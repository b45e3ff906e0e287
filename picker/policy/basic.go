package policy

import "sync/atomic"

// leastLoad picks the worker with the fewest requests in flight.
type leastLoad struct{}

func (leastLoad) rank(_ *engine, p *pick) {
	for i := range p.cands {
		p.cands[i].cost = float64(p.cands[i].w.InFlight())
	}
}

// roundRobin walks the candidates in turn, one step per pick.
type roundRobin struct{ next atomic.Uint64 }

func (r *roundRobin) rank(_ *engine, p *pick) {
	m := uint64(len(p.cands))
	start := (r.next.Add(1) - 1) % m
	for i := range p.cands {
		p.cands[i].cost = float64((uint64(i) + m - start) % m)
	}
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
