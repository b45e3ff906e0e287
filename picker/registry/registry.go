package registry

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/utils/clock"
)

// Listener hears of workers joining and leaving. Calls are made one at a
// time, in the order the changes happened, after the change is visible in
// Workers. A listener must not call back into the registry's write methods.
//
// A parked worker (its pod unready, its server running on) has not left:
// it is out of Workers, but its listeners keep what they hold for it.
type Listener interface {
	WorkerAdded(w *Worker)
	WorkerRemoved(w *Worker)
}

// Settler is a Listener told when the calls of one change are all made:
// one change may remove a worker and add another for the same pod (a new
// UID, a new address), the removals first. A change that only parks
// workers or brings parked ones back is settled too, with no other call.
type Settler interface {
	Listener
	Settled()
}

// Registry is the set of workers the picker may route to. Reads are
// lock-free (an immutable snapshot); writes are serialized.
type Registry struct {
	mu sync.Mutex // serializes writers and listener calls
	// byKey are the workers, parked ones too: the snapshot is those not
	// parked. A parked worker stays until its pod is gone or returns as
	// another server, so byKey holds no more than one worker per endpoint
	// of the pods that exist.
	byKey map[Key]*Worker
	// draining are removed workers with requests in flight, by key: the
	// same endpoint back carries them (Worker.carry). carrying are the
	// workers whose carry is set. Both are pruned at each change.
	draining map[Key]*Worker
	carrying map[*Worker]struct{}
	// snapshot are the workers of byKey, live and parked, published
	// together so that one read sees each worker once.
	snapshot  atomic.Pointer[members]
	clock     clock.PassiveClock // tells when a worker was parked
	listeners []Listener
	synced    atomic.Bool
	first     chan struct{} // closed by the first MarkSynced
	firstOnce sync.Once
}

// members is one published state of the registry: its workers in the
// picks and its parked ones, each ordered by address. Neither slice is
// modified once published; a change shares the parked one unless it parks,
// resumes or drops a parked worker.
type members struct {
	live, parked []*Worker
	byRole       atomic.Pointer[roleLists] // made on first read (role.go)
}

// Option configures a Registry.
type Option func(*Registry)

// WithClock sets the clock that tells when a worker was parked; the real
// clock by default.
func WithClock(clk clock.PassiveClock) Option {
	return func(r *Registry) { r.clock = clk }
}

// New returns an empty registry.
func New(opts ...Option) *Registry {
	r := &Registry{byKey: map[Key]*Worker{}, draining: map[Key]*Worker{}, carrying: map[*Worker]struct{}{},
		first: make(chan struct{}), clock: clock.RealClock{}}
	for _, o := range opts {
		o(r)
	}
	r.snapshot.Store(&members{live: []*Worker{}})
	return r
}

// AddListener registers l. Workers already present, parked ones too, are
// announced to it.
func (r *Registry) AddListener(l Listener) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.listeners = append(r.listeners, l)
	for _, w := range r.AllWorkers() {
		l.WorkerAdded(w)
	}
}

// Parked returns the parked workers, ordered by address: those whose pods
// are unready while their servers run on, out of Workers until they are
// Ready again. The slice is shared and must not be modified.
func (r *Registry) Parked() []*Worker { return r.snapshot.Load().parked }

// Workers returns the current workers, ordered by address. The slice is
// shared and must not be modified.
func (r *Registry) Workers() []*Worker { return r.snapshot.Load().live }

// AllWorkers returns the current workers and the parked ones, which are out
// of Workers while their pods are unready, ordered by address. A worker
// moves in and out of Workers as its pod flaps, never in and out of
// AllWorkers: one read sees every worker the registry holds, with the
// requests each counts, whatever its pod's readiness. The slice is built at
// each call while workers are parked (shared when none is), and must not be
// modified.
func (r *Registry) AllWorkers() []*Worker {
	m := r.snapshot.Load()
	if len(m.parked) == 0 {
		return m.live
	}
	all := make([]*Worker, 0, len(m.live)+len(m.parked))
	live, parked := m.live, m.parked
	for len(live) > 0 && len(parked) > 0 {
		if compareWorkers(live[0], parked[0]) < 0 {
			all, live = append(all, live[0]), live[1:]
		} else {
			all, parked = append(all, parked[0]), parked[1:]
		}
	}
	all = append(all, live...)
	return append(all, parked...)
}

// MarkSynced records that the registry reflects its source (the API server's
// view, or the static list). Readiness waits for it.
func (r *Registry) MarkSynced() {
	r.synced.Store(true)
	r.firstOnce.Do(func() { close(r.first) })
}

// FirstSynced is closed once the registry has first reflected its source:
// from then on a request finds the pool's workers, or learns that it has
// none or that the pool does not exist. It stays closed for good.
func (r *Registry) FirstSynced() <-chan struct{} { return r.first }

// MarkUnsynced records that the served pool does not exist: readiness is
// false until MarkSynced. That too is the source reflected (a request learns
// there is no pool), so it closes FirstSynced if nothing has yet.
func (r *Registry) MarkUnsynced() {
	r.synced.Store(false)
	r.firstOnce.Do(func() { close(r.first) })
}

// Synced reports whether MarkSynced was called (and MarkUnsynced not since).
func (r *Registry) Synced() bool { return r.synced.Load() }

// Update removes the workers of remove, then upserts upsert, and publishes
// one snapshot for the whole change (none when nothing changed). An
// endpoint whose address or container restarts changed replaces its
// worker: the old object is detached (its guards keep releasing into it)
// and a new one starts at zero. One whose rank alone changed (its port
// moved in the pool's target ports) is the same server: its worker stays,
// and takes the new rank; so does one whose OwnMetrics alone changed (the
// pool gained or lost target ports), and one whose Role alone changed (its
// pod's role label was edited), which also publishes a snapshot whose role
// lists follow, or whose Context alone changed (its context-length label
// was edited), read afresh by the next pick. An Unready endpoint parks its worker, which the
// same endpoint Ready again brings back. Its cost follows the change, not
// the size of the registry: workers not named are untouched, the same
// objects in the same places.
func (r *Registry) Update(upsert []Endpoint, remove []Key) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var c change
	for _, k := range remove {
		if w, ok := r.byKey[k]; ok {
			delete(r.byKey, k)
			c.removed = append(c.removed, w)
		}
	}
	for i := range upsert {
		r.upsertLocked(upsert[i], &c)
	}
	r.publishLocked(&c)
}

// Replace makes the registry hold exactly eps: missing workers are removed,
// new ones added, unchanged ones kept with their load (and those whose rank
// alone changed, with the new rank), and those of Unready endpoints parked.
func (r *Registry) Replace(eps []Endpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var c change
	keep := make(map[Key]bool, len(eps))
	for i := range eps {
		keep[eps[i].Key] = true
		r.upsertLocked(eps[i], &c)
	}
	for k, w := range r.byKey {
		if !keep[k] {
			delete(r.byKey, k)
			c.removed = append(c.removed, w)
		}
	}
	r.publishLocked(&c)
}

// change is what one Update or Replace did: workers that joined and left
// the registry, and workers that left the picks and returned to them while
// staying in it.
type change struct {
	added, removed  []*Worker
	parked, resumed []*Worker
	roles           bool // a kept worker's role changed
}

func (r *Registry) upsertLocked(ep Endpoint, c *change) {
	prev := r.draining[ep.Key]
	if old, ok := r.byKey[ep.Key]; ok {
		if old.sameServer(ep) {
			old.rank.Store(int64(ep.Rank))
			old.ownMetrics.Store(ep.OwnMetrics)
			old.context.Store(ep.Context.pack())
			old.setLabels(ep.Labels)
			if Role(old.role.Swap(uint32(ep.Role))) != ep.Role {
				c.roles = true
			}
			switch {
			case ep.Unready && !old.Parked():
				now := r.clock.Now()
				old.parked.Store(&now)
				c.parked = append(c.parked, old)
			case !ep.Unready && old.Parked():
				old.parked.Store(nil)
				c.resumed = append(c.resumed, old)
			}
			return
		}
		delete(r.byKey, ep.Key)
		c.removed = append(c.removed, old)
		prev = old
	}
	if ep.Unready {
		return // no worker until it is Ready
	}
	w := newWorker(ep)
	if prev != nil && prev.ep.Address == ep.Address && prev.InFlight() > 0 {
		w.carry.Store(prev)
		r.carrying[w] = struct{}{}
	}
	delete(r.draining, ep.Key)
	r.byKey[ep.Key] = w
	c.added = append(c.added, w)
}

// publishLocked installs a new snapshot and tells the listeners. Removed
// and parked workers are marked before the snapshot changes hands, so a
// pick that still holds the old snapshot can see the mark.
//
// The live and parked lists of the new snapshot are those of the old one
// with the workers that left them cut out and those that joined spliced in
// at their places, found by binary search: at most one copy of each list
// the change moved a worker in or out of, touching only the workers named,
// never a sort of the whole set.
func (r *Registry) publishLocked(c *change) {
	for _, w := range c.removed {
		w.removed.Store(true)
		delete(r.carrying, w)
		if _, back := r.byKey[w.ep.Key]; !back && w.InFlight() > 0 {
			r.draining[w.ep.Key] = w
		}
	}
	r.pruneCarriedLocked()
	if len(c.removed) > 0 || len(c.parked) > 0 || len(c.resumed) > 0 {
		servedEpoch.Add(1)
	}
	// A worker added and replaced within one change was never published.
	added := slices.DeleteFunc(c.added, (*Worker).Removed)
	old := r.snapshot.Load()
	var back []*Worker // resumed, and not in the old live list
	for _, w := range c.resumed {
		if w.Live() && !holds(old.live, w) {
			back = append(back, w)
		}
	}
	live, liveMoved := respliced(old.live, (*Worker).Live, c.removed, c.parked, added, back)
	parked, parkedMoved := respliced(old.parked, parkedHeld, c.removed, c.parked, c.resumed)
	if liveMoved || parkedMoved || c.roles { // c.roles alone: the same workers, new role lists
		r.snapshot.Store(&members{live: live, parked: parked})
	}
	if !liveMoved && !parkedMoved && len(added) == 0 && len(c.removed) == 0 {
		return
	}
	for _, l := range r.listeners {
		for _, w := range c.removed {
			l.WorkerRemoved(w)
		}
		for _, w := range added {
			l.WorkerAdded(w)
		}
		if s, ok := l.(Settler); ok {
			s.Settled()
		}
	}
}

// parkedHeld reports whether w belongs in the parked list: parked, and not
// removed.
func parkedHeld(w *Worker) bool { return w.Parked() && !w.Removed() }

// holds reports whether the ordered list ws holds w.
func holds(ws []*Worker, w *Worker) bool {
	i, ok := slices.BinarySearchFunc(ws, w, compareWorkers)
	return ok && ws[i] == w
}

// respliced returns the ordered list old without the workers of changed
// that do not belong in it and with those that do and are not in it, and
// whether it moved; old itself when it did not.
func respliced(old []*Worker, belongs func(*Worker) bool, changed ...[]*Worker) ([]*Worker, bool) {
	var cut []int
	var in []*Worker
	for _, ws := range changed {
		for _, w := range ws {
			i, ok := slices.BinarySearchFunc(old, w, compareWorkers)
			switch held := ok && old[i] == w; {
			case held && !belongs(w):
				cut = append(cut, i)
			case !held && belongs(w):
				in = append(in, w)
			}
		}
	}
	if len(cut) == 0 && len(in) == 0 {
		return old, false
	}
	return splice(old, cut, in), true
}

// splice returns old without the workers at the indexes cut and with the
// workers in, in order.
func splice(old []*Worker, cut []int, in []*Worker) []*Worker {
	ws := old
	if len(cut) > 0 {
		slices.Sort(cut)
		cut = slices.Compact(cut) // parked and replaced in one change
		ws = make([]*Worker, 0, len(old)-len(cut)+len(in))
		prev := 0
		for _, i := range cut {
			ws = append(ws, old[prev:i]...)
			prev = i + 1
		}
		ws = append(ws, old[prev:]...)
	}
	if len(in) > 0 {
		slices.SortFunc(in, compareWorkers)
		in = slices.Compact(in) // added, parked and resumed in one change
		base := ws
		ws = make([]*Worker, 0, len(base)+len(in))
		prev := 0
		for _, w := range in {
			i, _ := slices.BinarySearchFunc(base[prev:], w, compareWorkers)
			ws = append(ws, base[prev:prev+i]...)
			ws = append(ws, w)
			prev += i
		}
		ws = append(ws, base[prev:]...)
	}
	return ws
}

// pruneCarriedLocked forgets the replaced workers whose requests have all
// ended, so that a pod that flaps for days holds no chain of old objects.
func (r *Registry) pruneCarriedLocked() {
	for k, w := range r.draining {
		if w.InFlight() == 0 {
			delete(r.draining, k)
		}
	}
	for w := range r.carrying {
		if w.carried() == 0 {
			w.carry.Store(nil)
			delete(r.carrying, w)
		}
	}
}

// compareWorkers orders the snapshot's lists: by address, then by pod UID.
func compareWorkers(a, b *Worker) int {
	if c := strings.Compare(a.addr, b.addr); c != 0 {
		return c
	}
	return strings.Compare(a.ep.Key.UID, b.ep.Key.UID)
}
