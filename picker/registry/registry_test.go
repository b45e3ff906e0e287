package registry

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func endpoint(uid, addr string) Endpoint {
	ap := netip.MustParseAddrPort(addr)
	return Endpoint{Key: Key{UID: uid, Port: int32(ap.Port())}, Namespace: "ns", Name: "pod-" + uid, Address: ap}
}

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) WorkerAdded(w *Worker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "+"+w.Endpoint().Key.UID)
}

func (r *recorder) WorkerRemoved(w *Worker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "-"+w.Endpoint().Key.UID)
}

// upsert adds ep through Update and returns its worker.
func upsert(r *Registry, ep Endpoint) *Worker {
	r.Update([]Endpoint{ep}, nil)
	w, _ := lookup(r, ep.Key)
	return w
}

func remove(r *Registry, key Key) { r.Update(nil, []Key{key}) }

func lookup(r *Registry, key Key) (*Worker, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.byKey[key]
	return w, ok
}

func addresses(ws []*Worker) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.Address())
	}
	return out
}

func TestGuardPhases(t *testing.T) {
	cases := map[string]struct {
		steps                      func(g *Guard)
		wantPrefill, wantDecode    int64
		wantReleasedFrom           Phase
		wantFirstReleaseDecrements bool
	}{
		"release in prefill decrements prefill": {
			steps:            func(*Guard) {},
			wantReleasedFrom: Prefill, wantFirstReleaseDecrements: true,
		},
		"release after first token decrements decode": {
			steps:            func(g *Guard) { g.FirstToken() },
			wantReleasedFrom: Decode, wantFirstReleaseDecrements: true,
		},
		"first token twice moves once": {
			steps:            func(g *Guard) { g.FirstToken(); g.FirstToken() },
			wantReleasedFrom: Decode, wantFirstReleaseDecrements: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := newWorker(endpoint("a", "127.0.0.1:8000"))
			g := w.Admit()
			if p, d := w.Load(); p != 1 || d != 0 {
				t.Fatalf("after Admit load = (%d,%d), want (1,0)", p, d)
			}
			tc.steps(g)
			from, ok := g.Release()
			if from != tc.wantReleasedFrom || ok != tc.wantFirstReleaseDecrements {
				t.Errorf("Release() = (%v,%v), want (%v,%v)", from, ok, tc.wantReleasedFrom, tc.wantFirstReleaseDecrements)
			}
			if _, again := g.Release(); again {
				t.Error("second Release decremented again")
			}
			if g.FirstToken() {
				t.Error("FirstToken after Release moved the phase")
			}
			if p, d := w.Load(); p != tc.wantPrefill || d != tc.wantDecode {
				t.Errorf("after Release load = (%d,%d), want (%d,%d)", p, d, tc.wantPrefill, tc.wantDecode)
			}
		})
	}
}

func TestNilGuardIsInert(t *testing.T) {
	var g *Guard
	if g.FirstToken() {
		t.Error("nil guard FirstToken reported a move")
	}
	if _, ok := g.Release(); ok {
		t.Error("nil guard Release reported a decrement")
	}
	if g.Phase() != Released {
		t.Errorf("nil guard phase = %v, want released", g.Phase())
	}
}

func TestUpsertRemoveReplace(t *testing.T) {
	r := New()
	rec := &recorder{}
	r.AddListener(rec)

	a := upsert(r, endpoint("a", "127.0.0.2:8000"))
	b := upsert(r, endpoint("b", "127.0.0.1:8000"))
	if diff := cmp.Diff([]string{"127.0.0.1:8000", "127.0.0.2:8000"}, addresses(r.Workers())); diff != "" {
		t.Errorf("workers (-want +got):\n%s", diff)
	}
	if again := upsert(r, endpoint("a", "127.0.0.2:8000")); again != a {
		t.Error("an unchanged endpoint made a new worker")
	}

	// The pod's IP changed: a new worker, the old one detached.
	g := a.Admit()
	a2 := upsert(r, endpoint("a", "127.0.0.3:8000"))
	if a2 == a || !a.Removed() || a2.InFlight() != 0 {
		t.Fatalf("address change: new=%v oldRemoved=%v newLoad=%d", a2 != a, a.Removed(), a2.InFlight())
	}
	g.Release()
	if a.InFlight() != 0 || a2.InFlight() != 0 {
		t.Errorf("after releasing the old guard: old=%d new=%d, want 0 0", a.InFlight(), a2.InFlight())
	}

	r.Replace([]Endpoint{endpoint("b", "127.0.0.1:8000"), endpoint("c", "127.0.0.4:8000")})
	if diff := cmp.Diff([]string{"127.0.0.1:8000", "127.0.0.4:8000"}, addresses(r.Workers())); diff != "" {
		t.Errorf("after Replace (-want +got):\n%s", diff)
	}
	if w, _ := lookup(r, Key{UID: "b", Port: 8000}); w != b {
		t.Error("Replace rebuilt an unchanged worker")
	}
	remove(r, Key{UID: "b", Port: 8000})
	remove(r, Key{UID: "missing", Port: 1})

	want := []string{"+a", "+b", "-a", "+a", "-a", "+c", "-b"}
	if diff := cmp.Diff(want, rec.events); diff != "" {
		t.Errorf("listener events (-want +got):\n%s", diff)
	}
}

func TestAddListenerAnnouncesExisting(t *testing.T) {
	r := New()
	upsert(r, endpoint("a", "127.0.0.1:8000"))
	rec := &recorder{}
	r.AddListener(rec)
	if diff := cmp.Diff([]string{"+a"}, rec.events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// settler is a recorder told when each change's calls are all made.
type settler struct{ recorder }

func (s *settler) Settled() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, "settled")
}

// A Settler hears of a change's removals, then its additions, then that the
// change is settled; a change that changes nothing tells nothing.
func TestASettlerIsToldWhenAChangeIsComplete(t *testing.T) {
	r := New()
	upsert(r, endpoint("a", "127.0.0.1:8000"))
	s := &settler{}
	r.AddListener(s)
	r.Replace([]Endpoint{endpoint("b", "127.0.0.1:8000"), endpoint("c", "127.0.0.2:8000")})
	r.Replace([]Endpoint{endpoint("b", "127.0.0.1:8000"), endpoint("c", "127.0.0.2:8000")})
	if diff := cmp.Diff([]string{"+a", "-a", "+b", "+c", "settled"}, s.events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestGuardsUnderChurn interleaves admit, first token, release, removal and
// re-creation of the same address from many goroutines. Whatever the order,
// no count goes negative, every count returns to 0 once all guards are
// released, and a worker re-created at an old address is never touched by a
// guard of its predecessor.
func TestGuardsUnderChurn(t *testing.T) {
	r := New()
	const pods = 4
	addr := func(i int) string { return fmt.Sprintf("127.0.0.%d:8000", i+1) }
	for i := range pods {
		upsert(r, endpoint(fmt.Sprintf("pod%d-gen0", i), addr(i)))
	}

	var (
		work    sync.WaitGroup // churn, requests and their concurrent releases
		watch   sync.WaitGroup
		mu      sync.Mutex
		seen    = map[*Worker]bool{}
		stop    = make(chan struct{})
		negSeen = make(chan string, 1)
		// The churn starts once a request has admitted on a first
		// generation worker, and the requests go on until it has ended:
		// both generations see traffic however the goroutines are run.
		admitted  = make(chan struct{})
		firstOnce sync.Once
		churned   atomic.Bool
	)
	// Watcher: counts must never be observed negative.
	watch.Add(1)
	go func() {
		defer watch.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, w := range r.Workers() {
				if p, d := w.Load(); p < 0 || d < 0 {
					select {
					case negSeen <- fmt.Sprintf("%s: prefill=%d decode=%d", w.Address(), p, d):
					default:
					}
				}
			}
		}
	}()
	// Churn: re-create pods with the same address under a new UID.
	work.Add(1)
	go func() {
		defer work.Done()
		defer churned.Store(true)
		<-admitted
		rng := rand.New(rand.NewPCG(1, 2))
		for gen := 1; gen <= 200; gen++ {
			i := rng.IntN(pods)
			switch rng.IntN(3) {
			case 0:
				remove(r, Key{UID: fmt.Sprintf("pod%d-gen%d", i, gen-1), Port: 8000})
				upsert(r, endpoint(fmt.Sprintf("pod%d-gen%d", i, gen), addr(i)))
			case 1:
				eps := make([]Endpoint, 0, pods)
				for j := range pods {
					eps = append(eps, endpoint(fmt.Sprintf("pod%d-gen%d", j, gen), addr(j)))
				}
				r.Replace(eps)
			default:
				upsert(r, endpoint(fmt.Sprintf("pod%d-gen%d", i, gen), addr(i)))
			}
		}
	}()
	// Requests: each admits on a worker of the current snapshot and releases,
	// sometimes racing a second release from another goroutine.
	for c := range 16 {
		work.Add(1)
		go func() {
			defer work.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			// Until 2000 requests are sent and one of them started after
			// the churn ended.
			for n, last := 0, false; !last; n++ {
				last = n >= 2000 && churned.Load()
				ws := r.Workers()
				if len(ws) == 0 {
					continue
				}
				w := ws[rng.IntN(len(ws))]
				mu.Lock()
				seen[w] = true
				mu.Unlock()
				g := w.Admit()
				firstOnce.Do(func() { close(admitted) })
				if rng.IntN(2) == 0 {
					g.FirstToken()
				}
				if rng.IntN(4) == 0 {
					work.Add(1)
					go func() {
						defer work.Done()
						g.FirstToken()
						g.Release()
					}()
				}
				g.Release()
			}
		}()
	}
	work.Wait()
	close(stop)
	watch.Wait()

	select {
	case msg := <-negSeen:
		t.Fatalf("negative count observed: %s", msg)
	default:
	}
	if len(seen) <= pods {
		t.Fatalf("only %d worker objects saw traffic; the churn did not interleave", len(seen))
	}
	for w := range seen {
		if p, d := w.Load(); p != 0 || d != 0 {
			t.Errorf("worker %s (%s removed=%v): load (%d,%d), want (0,0)", w.Address(), w.Endpoint().Key.UID, w.Removed(), p, d)
		}
	}
}

func TestRecreatedAddressStartsAtZero(t *testing.T) {
	r := New()
	old := upsert(r, endpoint("old", "127.0.0.1:8000"))
	guards := []*Guard{old.Admit(), old.Admit(), old.Admit()}
	guards[0].FirstToken()

	remove(r, Key{UID: "old", Port: 8000})
	fresh := upsert(r, endpoint("new", "127.0.0.1:8000"))
	mine := fresh.Admit()
	for _, g := range guards {
		g.Release()
	}
	if p, d := fresh.Load(); p != 1 || d != 0 {
		t.Errorf("re-created worker load = (%d,%d), want its own (1,0)", p, d)
	}
	mine.Release()
	if fresh.InFlight() != 0 || old.InFlight() != 0 {
		t.Errorf("after all releases: fresh=%d old=%d, want 0 0", fresh.InFlight(), old.InFlight())
	}
	if fresh.ID() == old.ID() {
		t.Error("re-created worker reused the old ID")
	}
}

// The same pod back at the same address as a new worker (it left the pool
// and came back, or its container restarted) counts the requests still in
// flight on the one it replaced, which load the same address: it counts them
// until their guards release (into the old object), for the load and for
// AdmitBelow's limit.
func TestAPodBackAsANewWorkerCarriesItsRequests(t *testing.T) {
	r := New()
	ep := endpoint("pod", "127.0.0.1:8000")
	old := upsert(r, ep)
	guards := []*Guard{old.Admit(), old.Admit()}
	guards[0].FirstToken()
	remove(r, ep.Key)
	back := upsert(r, ep)
	if back == old || back.ID() == old.ID() {
		t.Fatal("the pod back is the old worker object")
	}
	if p, d := back.Load(); p != 1 || d != 1 || back.InFlight() != 2 {
		t.Errorf("back with 2 requests in flight: load (%d,%d), in flight %d; want (1,1), 2", p, d, back.InFlight())
	}
	g, ok := back.AdmitBelow(3)
	if !ok {
		t.Fatal("refused below the limit")
	}
	if _, ok := back.AdmitBelow(3); ok {
		t.Error("admitted past the limit: the requests from before the return were not counted")
	}
	guards[1].FirstToken() // in the old object, where the guard was taken
	if p, d := back.Load(); p != 1 || d != 2 {
		t.Errorf("after an old request's first token: load (%d,%d), want (1,2)", p, d)
	}
	for _, g := range guards {
		g.Release()
	}
	if p, d := back.Load(); p != 1 || d != 0 || old.InFlight() != 0 {
		t.Errorf("after the old requests ended: load (%d,%d), old in flight %d; want (1,0), 0", p, d, old.InFlight())
	}
	g.Release()
	upsert(r, endpoint("other", "127.0.0.2:8000")) // any change cuts the spent link
	if back.carry.Load() != nil || len(r.draining) != 0 || len(r.carrying) != 0 {
		t.Errorf("the ended requests' worker is still held: carry %v, draining %d, carrying %d", back.carry.Load(), len(r.draining), len(r.carrying))
	}

	// Coming back for long with a request in flight each time holds no
	// chain of old objects once the requests have ended.
	w := back
	var held []*Guard
	for range 100 {
		held = append(held, w.Admit())
		remove(r, ep.Key)
		w = upsert(r, ep)
	}
	if w.InFlight() != 100 {
		t.Errorf("after 100 returns with a request each: in flight %d, want 100", w.InFlight())
	}
	for _, g := range held {
		g.Release()
	}
	remove(r, Key{UID: "other", Port: 8000})
	if w.InFlight() != 0 || w.carry.Load() != nil || len(r.draining) != 0 || len(r.carrying) != 0 {
		t.Errorf("after the returns' requests ended: in flight %d, carry %v, draining %d, carrying %d", w.InFlight(), w.carry.Load(), len(r.draining), len(r.carrying))
	}

	// A pod that moved to another address left its requests behind.
	moved := endpoint("pod", "127.0.0.3:8000")
	left := w.Admit()
	defer left.Release()
	if m := upsert(r, moved); m.InFlight() != 0 {
		t.Errorf("the pod at a new address starts with %d in flight, want 0", m.InFlight())
	}
}

// AdmitBelow never lets concurrent admissions pass the limit together, and
// a released guard frees its place.
func TestAdmitBelowHoldsTheLimit(t *testing.T) {
	const limit, tries = 3, 64
	w := newWorker(endpoint("a", "127.0.0.1:8000"))
	guards := make(chan *Guard, tries)
	var wg sync.WaitGroup
	for range tries {
		wg.Go(func() {
			if g, ok := w.AdmitBelow(limit); ok {
				guards <- g
			}
		})
	}
	wg.Wait()
	close(guards)
	var held []*Guard
	for g := range guards {
		held = append(held, g)
	}
	if len(held) != limit || w.InFlight() != limit {
		t.Fatalf("%d of %d concurrent admissions got a guard, in flight %d; want exactly %d", len(held), tries, w.InFlight(), limit)
	}
	if _, ok := w.AdmitBelow(limit); ok {
		t.Fatal("admitted on a full worker")
	}
	held[0].FirstToken()
	held[0].Release()
	g, ok := w.AdmitBelow(limit)
	if !ok {
		t.Fatal("a released place was not free")
	}
	g.Release()
	for _, g := range held[1:] {
		g.Release()
	}
	if p, d := w.Load(); p != 0 || d != 0 || w.InFlight() != 0 {
		t.Errorf("after every release load = (%d,%d), in flight %d; want 0", p, d, w.InFlight())
	}
}

// FirstSynced is open until the registry first reflects its source, and
// stays closed when the source is lost again (a deleted pool), so a
// listener held back by it opens once.
func TestFirstSyncedClosesOnceAndStaysClosed(t *testing.T) {
	r := New()
	select {
	case <-r.FirstSynced():
		t.Fatal("closed before MarkSynced")
	default:
	}
	r.MarkSynced()
	r.MarkUnsynced()
	r.MarkSynced()
	select {
	case <-r.FirstSynced():
	default:
		t.Fatal("open after MarkSynced")
	}
	if !r.Synced() {
		t.Error("Synced is false after MarkSynced")
	}

	missing := New()
	missing.MarkUnsynced()
	select {
	case <-missing.FirstSynced():
	default:
		t.Fatal("open after MarkUnsynced: a pool found missing is the source reflected")
	}
	if missing.Synced() {
		t.Error("Synced is true for a missing pool")
	}
}

// Reordering a pool's target ports moves each port to a new place, and so
// a new rank, but every (pod, port) is the same server at the same address:
// its worker stays the same object, with its requests in flight, its ID
// (what the prefix index knows it by) and its metrics, and only its rank
// follows the new order. No listener hears of a change.
func TestAPortsNewPlaceKeepsItsWorker(t *testing.T) {
	r := New()
	at := func(addr string, rank int) Endpoint {
		ep := endpoint("pod", addr)
		ep.Rank = rank
		return ep
	}
	r.Replace([]Endpoint{at("127.0.0.1:8000", 0), at("127.0.0.1:8001", 1)})
	first, _ := lookup(r, Key{UID: "pod", Port: 8000})
	second, _ := lookup(r, Key{UID: "pod", Port: 8001})
	guard := first.Admit()
	defer guard.Release()
	m := &Metrics{Waiting: 3}
	first.SetMetrics(m)
	rec := &recorder{}
	r.AddListener(rec)
	rec.events = nil

	r.Replace([]Endpoint{at("127.0.0.1:8001", 0), at("127.0.0.1:8000", 1)})

	if got, _ := lookup(r, Key{UID: "pod", Port: 8000}); got != first {
		t.Errorf("port 8000 moved to the second place: its worker was replaced (ID %d, was %d)", got.ID(), first.ID())
	}
	if got, _ := lookup(r, Key{UID: "pod", Port: 8001}); got != second {
		t.Errorf("port 8001 moved to the first place: its worker was replaced (ID %d, was %d)", got.ID(), second.ID())
	}
	if first.Removed() || second.Removed() {
		t.Error("a worker whose port only moved in the list was marked removed")
	}
	if n := first.InFlight(); n != 1 {
		t.Errorf("port 8000's requests in flight after the reorder = %d, want 1", n)
	}
	if first.Metrics() != m {
		t.Error("port 8000 lost its scraped metrics in the reorder")
	}
	if got := []int{first.Endpoint().Rank, second.Endpoint().Rank}; !cmp.Equal(got, []int{1, 0}) {
		t.Errorf("ranks of ports 8000, 8001 after the reorder = %v, want [1 0]", got)
	}
	if len(rec.events) != 0 {
		t.Errorf("listeners heard %v for a reorder of the ports, want nothing", rec.events)
	}

	r.Update([]Endpoint{at("127.0.0.1:8000", 0)}, []Key{{UID: "pod", Port: 8001}})
	if got, _ := lookup(r, Key{UID: "pod", Port: 8000}); got != first || first.Endpoint().Rank != 0 {
		t.Errorf("port 8000 left alone at the first place: same worker %t, rank %d; want true, 0", got == first, first.Endpoint().Rank)
	}
	if !second.Removed() {
		t.Error("the port taken out of the pool kept its worker")
	}
}

// A pool that gains a second target port (or loses it) changes where the
// metrics of its first port are read, not the server behind it: the worker
// stays the same object, with its requests in flight, and takes the new
// OwnMetrics.
func TestOwnMetricsAloneKeepsTheWorker(t *testing.T) {
	r := New()
	ep := endpoint("pod", "127.0.0.1:8000")
	r.Replace([]Endpoint{ep})
	w, _ := lookup(r, ep.Key)
	guard := w.Admit()
	defer guard.Release()

	for _, own := range []bool{true, false} {
		ep.OwnMetrics = own
		r.Replace([]Endpoint{ep})
		if got, _ := lookup(r, ep.Key); got != w || w.Removed() || w.InFlight() != 1 {
			t.Fatalf("OwnMetrics set to %t: the worker was replaced or lost its request in flight", own)
		}
		if w.OwnMetrics() != own || w.Endpoint().OwnMetrics != own {
			t.Errorf("OwnMetrics() = %t, Endpoint().OwnMetrics = %t; want %t", w.OwnMetrics(), w.Endpoint().OwnMetrics, own)
		}
	}
}
