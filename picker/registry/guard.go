package registry

import (
	"sync/atomic"
	"time"
)

// Phase is where a guarded request is in its life.
type Phase uint32

const (
	// Prefill is the phase of an admitted request with no output token seen yet.
	Prefill Phase = iota
	// Decode is the phase once the first output token was seen.
	Decode
	// Released is the phase once the request no longer counts.
	Released
)

func (p Phase) String() string {
	switch p {
	case Prefill:
		return "prefill"
	case Decode:
		return "decode"
	default:
		return "released"
	}
}

// Guard is the load one request holds on one worker. It points at the worker
// object it was admitted on and never looks a worker up again, so a guard of a
// removed worker decrements the detached object and nothing else.
//
// The zero Guard and a nil *Guard are inert: every method is a no-op.
type Guard struct {
	w     *Worker
	phase atomic.Uint32
	tpot  time.Duration // the request's TPOT objective, counted on w (objectives.go); 0 for none
}

// Worker returns the worker the guard counts on.
func (g *Guard) Worker() *Worker {
	if g == nil {
		return nil
	}
	return g.w
}

// Phase returns the guard's current phase.
func (g *Guard) Phase() Phase {
	if g == nil || g.w == nil {
		return Released
	}
	return Phase(g.phase.Load())
}

// FirstToken moves the request from prefill to decode. It reports whether
// this call made the move; later calls, and calls after Release, do nothing.
func (g *Guard) FirstToken() bool {
	if g == nil || g.w == nil {
		return false
	}
	// Count decode before the phase changes, so that a Release racing with
	// this call never takes a decode count that is not there yet: counts may
	// briefly read one high, never negative.
	g.w.decode.Add(1)
	if !g.phase.CompareAndSwap(uint32(Prefill), uint32(Decode)) {
		g.w.decode.Add(-1)
		return false
	}
	g.w.prefill.Add(-1)
	return true
}

// Release uncounts the request from the phase it is in. Exactly one call
// ever decrements; it reports whether it was this one and the phase it left.
func (g *Guard) Release() (Phase, bool) {
	if g == nil || g.w == nil {
		return Released, false
	}
	for {
		p := g.phase.Load()
		if Phase(p) == Released {
			return Released, false
		}
		if g.phase.CompareAndSwap(p, uint32(Released)) {
			if g.tpot > 0 {
				g.w.tpot.remove(g.tpot)
			}
			if Phase(p) == Decode {
				g.w.decode.Add(-1)
			} else {
				g.w.prefill.Add(-1)
			}
			g.w.inFlight.Add(-1)
			return Phase(p), true
		}
	}
}
