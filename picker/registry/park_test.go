package registry

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

func unready(ep Endpoint) Endpoint { ep.Unready = true; return ep }

func restarted(ep Endpoint, n int32) Endpoint { ep.Restarts = n; return ep }

// A pod unready while its server runs on parks its worker: out of the
// picks, the same object with its requests in flight, its listeners keeping
// what they hold for it. Ready again, the same object returns. A container
// restart, a new address or the pod's removal ends it.
func TestAnUnreadyPodParksItsWorker(t *testing.T) {
	r := New()
	rec, set := &recorder{}, &settler{}
	r.AddListener(rec)
	r.AddListener(set)
	ep := endpoint("a", "127.0.0.1:8000")
	other := upsert(r, endpoint("b", "127.0.0.2:8000"))
	w := upsert(r, ep)
	g := w.Admit()
	g.FirstToken()
	stale := r.Workers()

	r.Update([]Endpoint{unready(ep)}, nil)
	if diff := cmp.Diff([]string{"127.0.0.2:8000"}, addresses(r.Workers())); diff != "" {
		t.Errorf("workers while a is unready (-want +got):\n%s", diff)
	}
	if !slices.Contains(stale, w) || w.Live() || !w.Parked() || w.Removed() {
		t.Errorf("a parked worker in an older list: live %v, parked %v, removed %v; want parked alone", w.Live(), w.Parked(), w.Removed())
	}
	if !w.Endpoint().Unready {
		t.Error("a parked worker's endpoint is not Unready")
	}
	late := &recorder{}
	r.AddListener(late)

	heard := len(set.events)
	r.Update([]Endpoint{ep}, nil)
	if got := set.events[heard:]; !slices.Equal(got, []string{"settled"}) {
		t.Errorf("a listener heard %v as the parked worker returned, want the change settled alone", got)
	}
	if back, _ := lookup(r, ep.Key); back != w || !w.Live() {
		t.Fatalf("Ready again: worker %p (live %v), want the parked one %p back", back, w.Live(), w)
	}
	if diff := cmp.Diff([]string{"127.0.0.1:8000", "127.0.0.2:8000"}, addresses(r.Workers())); diff != "" {
		t.Errorf("workers with a back (-want +got):\n%s", diff)
	}
	if p, d := w.Load(); p != 0 || d != 1 {
		t.Errorf("back with a request in decode: load (%d,%d), want (0,1)", p, d)
	}
	if _, ok := g.Release(); !ok || w.InFlight() != 0 {
		t.Errorf("the request from before the flap released %v, in flight %d after; want true, 0", ok, w.InFlight())
	}

	// A container restarted while the pod was unready: a new server, with
	// an empty cache. The old worker leaves; the pod has none until Ready.
	g = w.Admit()
	r.Update([]Endpoint{unready(ep)}, nil)
	r.Update([]Endpoint{unready(restarted(ep, 1))}, nil)
	if !w.Removed() {
		t.Error("the worker of a restarted container was kept")
	}
	if _, ok := lookup(r, ep.Key); ok {
		t.Error("an unready pod with a restarted container got a worker")
	}
	fresh := upsert(r, restarted(ep, 1))
	if fresh == w || fresh.InFlight() != 1 {
		t.Errorf("the restarted pod back: same object %v, in flight %d; want a new object carrying the old request", fresh == w, fresh.InFlight())
	}
	g.Release()
	if fresh.InFlight() != 0 {
		t.Errorf("after the old request ended the restarted pod counts %d, want 0", fresh.InFlight())
	}

	// A restart seen with no unready status between is a new server too.
	again := upsert(r, restarted(ep, 2))
	if again == fresh || !fresh.Removed() {
		t.Error("a restart seen while Ready kept the old worker")
	}

	// A parked worker whose pod is removed leaves for good.
	r.Update([]Endpoint{unready(restarted(ep, 2))}, nil)
	remove(r, ep.Key)
	if !again.Removed() {
		t.Error("the parked worker of a removed pod stayed")
	}
	// An unready pod that never had a worker gets none.
	r.Update([]Endpoint{unready(endpoint("c", "127.0.0.3:8000"))}, nil)
	if _, ok := lookup(r, Key{UID: "c", Port: 8000}); ok {
		t.Error("a pod never Ready got a worker")
	}
	if len(r.byKey) != 1 || r.byKey[other.Endpoint().Key] != other {
		t.Errorf("the registry holds %d workers, want b's alone", len(r.byKey))
	}

	want := []string{"+b", "+a", "-a", "+a", "-a", "+a", "-a"}
	if diff := cmp.Diff(want, rec.events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// A listener added later hears of every worker, parked ones too, in
	// address order.
	if diff := cmp.Diff([]string{"+a", "+b", "-a", "+a", "-a", "+a", "-a"}, late.events); diff != "" {
		t.Errorf("events of a listener added while a was parked (-want +got):\n%s", diff)
	}
}

// AllWorkers lists the parked workers with the others, each once, in
// address order, and tells since when each is parked; a worker leaves it
// only when it leaves the registry.
func TestAllWorkersListsParkedWorkers(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakePassiveClock(start)
	r := New(WithClock(clk))
	ep := endpoint("a", "127.0.0.1:8000")
	w := upsert(r, ep)
	upsert(r, endpoint("b", "127.0.0.2:8000"))
	both := []string{"127.0.0.1:8000", "127.0.0.2:8000"}

	clk.SetTime(start.Add(time.Minute))
	r.Update([]Endpoint{unready(ep)}, nil)
	clk.SetTime(start.Add(time.Hour)) // still unready: parked since the first time
	r.Update([]Endpoint{unready(ep)}, nil)
	if diff := cmp.Diff(both, addresses(r.AllWorkers())); diff != "" {
		t.Errorf("all workers while a is parked (-want +got):\n%s", diff)
	}
	if since, ok := w.ParkedSince(); !ok || !since.Equal(start.Add(time.Minute)) {
		t.Errorf("ParkedSince() = %v, %v; want %v, true", since, ok, start.Add(time.Minute))
	}

	r.Update([]Endpoint{ep}, nil)
	if _, ok := w.ParkedSince(); ok {
		t.Error("a worker back in the picks is still parked")
	}
	if diff := cmp.Diff(both, addresses(r.AllWorkers())); diff != "" {
		t.Errorf("all workers with a back (-want +got):\n%s", diff)
	}

	r.Update([]Endpoint{unready(ep)}, nil)
	r.Update([]Endpoint{unready(restarted(ep, 1))}, nil) // a new server: the parked worker leaves
	if diff := cmp.Diff([]string{"127.0.0.2:8000"}, addresses(r.AllWorkers())); diff != "" {
		t.Errorf("all workers once a's container restarted (-want +got):\n%s", diff)
	}
	fresh := upsert(r, restarted(ep, 1))
	r.Update([]Endpoint{unready(restarted(ep, 1))}, nil)
	remove(r, ep.Key)
	if diff := cmp.Diff([]string{"127.0.0.2:8000"}, addresses(r.AllWorkers())); diff != "" || !fresh.Removed() {
		t.Errorf("all workers once parked a was removed (-want +got):\n%s", diff)
	}
}

// Parked lists the parked workers and only them: one back Ready, or
// dropped with its pod, leaves the list.
func TestParkedListsTheParkedWorkers(t *testing.T) {
	r := New()
	a, b := endpoint("a", "127.0.0.1:8000"), endpoint("b", "127.0.0.2:8000")
	upsert(r, a)
	upsert(r, b)
	if len(r.Parked()) != 0 {
		t.Fatalf("parked %v with every pod Ready, want none", addresses(r.Parked()))
	}
	r.Update([]Endpoint{unready(b), unready(a)}, nil)
	if diff := cmp.Diff([]string{"127.0.0.1:8000", "127.0.0.2:8000"}, addresses(r.Parked())); diff != "" {
		t.Errorf("parked with both pods unready (-want +got):\n%s", diff)
	}
	r.Update([]Endpoint{a}, nil)
	if diff := cmp.Diff([]string{"127.0.0.2:8000"}, addresses(r.Parked())); diff != "" {
		t.Errorf("parked with a Ready again (-want +got):\n%s", diff)
	}
	remove(r, b.Key)
	if len(r.Parked()) != 0 {
		t.Errorf("parked %v once b's pod is gone, want none", addresses(r.Parked()))
	}
}

// One read of AllWorkers sees every worker exactly once while pods flap in
// and out of readiness, one change parking some workers and resuming
// others: an idle check that reads each worker's requests through it
// misses none and counts none twice.
func TestAllWorkersSeesEachWorkerOnceWhilePodsFlap(t *testing.T) {
	r := New()
	eps := benchEndpoints(64)
	r.Replace(eps)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(3, 4))
		for range 2000 {
			up := make([]Endpoint, 1+rng.IntN(4))
			for i := range up {
				up[i] = eps[rng.IntN(len(eps))]
				up[i].Unready = rng.IntN(2) == 0
			}
			r.Update(up, nil)
		}
	})
	for reads := 0; ; reads++ {
		select {
		case <-done:
			wg.Wait()
			if reads == 0 {
				t.Fatal("no read ran while the pods flapped")
			}
			return
		default:
		}
		all := r.AllWorkers()
		seen := make(map[Key]int, len(all))
		for _, w := range all {
			seen[w.Endpoint().Key]++
		}
		for _, ep := range eps {
			if n := seen[ep.Key]; n != 1 {
				t.Fatalf("read %d: worker %s seen %d times, want once", reads, ep.Key.UID, n)
			}
		}
		if len(all) != len(eps) || !slices.IsSortedFunc(all, compareWorkers) {
			t.Fatalf("read %d: %d workers, sorted %v; want %d in address order", reads, len(all), slices.IsSortedFunc(all, compareWorkers), len(eps))
		}
	}
}
