package registry

import (
	"sync"
	"testing"
	"time"
)

// A worker's least TPOT objective is that of the requests in flight there
// that stated one: it follows their admissions and releases, a second
// Release changes nothing, and requests without one never count.
func TestLeastTPOTObjectiveFollowsTheGuards(t *testing.T) {
	w := newWorker(endpoint("a", "127.0.0.1:8000"))
	check := func(when string, want time.Duration) {
		t.Helper()
		if got := w.LeastTPOTObjective(); got != want {
			t.Errorf("%s: LeastTPOTObjective = %v, want %v", when, got, want)
		}
	}
	check("idle", 0)
	none := w.AdmitWith(0)
	check("a request without one", 0)
	slow := w.AdmitWith(50 * time.Millisecond)
	fast, ok := w.AdmitBelowWith(10, 20*time.Millisecond)
	if !ok {
		t.Fatal("AdmitBelowWith refused under its limit")
	}
	twin := w.AdmitWith(20 * time.Millisecond)
	check("three", 20*time.Millisecond)
	fast.Release()
	fast.Release()
	check("one of the two 20 ms released, twice", 20*time.Millisecond)
	twin.FirstToken()
	twin.Release()
	check("both 20 ms released", 50*time.Millisecond)
	slow.Release()
	none.Release()
	check("all released", 0)
	if _, ok := w.AdmitBelowWith(0, time.Millisecond); ok || w.LeastTPOTObjective() != 0 {
		t.Errorf("a refused admission counted its objective: %v", w.LeastTPOTObjective())
	}
}

// The requests in flight on a worker a new one replaced at its address
// count on the new one, as their load does.
func TestLeastTPOTObjectiveCountsCarriedRequests(t *testing.T) {
	old := newWorker(endpoint("a", "127.0.0.1:8000"))
	g := old.AdmitWith(30 * time.Millisecond)
	w := newWorker(endpoint("b", "127.0.0.1:8000"))
	w.carry.Store(old)
	if got := w.LeastTPOTObjective(); got != 30*time.Millisecond {
		t.Errorf("LeastTPOTObjective = %v, want the carried request's 30ms", got)
	}
	g.Release()
	if got := w.LeastTPOTObjective(); got != 0 {
		t.Errorf("after its release LeastTPOTObjective = %v, want 0", got)
	}
}

// Guards admitted and released from many goroutines leave nothing counted.
func TestTPOTObjectivesConcurrent(t *testing.T) {
	w := newWorker(endpoint("a", "127.0.0.1:8000"))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				g := w.AdmitWith(time.Duration(1+(i+j)%5) * time.Millisecond)
				if w.LeastTPOTObjective() == 0 {
					t.Error("a request in flight with an objective, and none counted")
				}
				g.Release()
			}
		})
	}
	wg.Wait()
	if got := w.LeastTPOTObjective(); got != 0 {
		t.Errorf("LeastTPOTObjective after every release = %v, want 0", got)
	}
}
