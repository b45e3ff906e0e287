package registry

import (
	"sync"
	"sync/atomic"
	"time"
)

// tpotObjectives are the TPOT objectives of the requests in flight on a
// worker that stated one: each counted from its admission to its release
// by the guard that holds it, so that what a worker shows is exactly the
// requests still there.
type tpotObjectives struct {
	mu    sync.Mutex
	count map[time.Duration]int // requests by objective; made at the first
	least atomic.Int64          // the least objective counted, 0 for none
}

func (o *tpotObjectives) add(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.count == nil {
		o.count = map[time.Duration]int{}
	}
	o.count[d]++
	if least := time.Duration(o.least.Load()); least == 0 || d < least {
		o.least.Store(int64(d))
	}
}

func (o *tpotObjectives) remove(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.count[d]--
	if o.count[d] > 0 {
		return
	}
	delete(o.count, d)
	if time.Duration(o.least.Load()) != d {
		return
	}
	least := time.Duration(0)
	for k := range o.count { // the distinct objectives: a handful
		if least == 0 || k < least {
			least = k
		}
	}
	o.least.Store(int64(least))
}

// AdmitWith is Admit for a request that states a TPOT objective (0: none):
// until the guard is released, the worker's LeastTPOTObjective counts it.
func (w *Worker) AdmitWith(tpot time.Duration) *Guard {
	g := w.Admit()
	g.hold(tpot)
	return g
}

// AdmitBelowWith is AdmitBelow for a request that states a TPOT objective
// (0: none), counted as AdmitWith counts it.
func (w *Worker) AdmitBelowWith(limit int64, tpot time.Duration) (*Guard, bool) {
	g, ok := w.AdmitBelow(limit)
	if ok {
		g.hold(tpot)
	}
	return g, ok
}

// hold counts the guard's TPOT objective on its worker, before the guard
// is handed out: Release, which uncounts it, can only come after.
func (g *Guard) hold(tpot time.Duration) {
	if tpot > 0 {
		g.tpot = tpot
		g.w.tpot.add(tpot)
	}
}

// LeastTPOTObjective returns the least TPOT objective of the requests in
// flight on the worker (those it replaced at its address too) that stated
// one, and 0 when none did: the pace a request placed there must not slow
// them below.
func (w *Worker) LeastTPOTObjective() time.Duration {
	least := time.Duration(w.tpot.least.Load())
	for c := w.carry.Load(); c != nil; c = c.carry.Load() {
		if d := time.Duration(c.tpot.least.Load()); d > 0 && (least == 0 || d < least) {
			least = d
		}
	}
	return least
}
