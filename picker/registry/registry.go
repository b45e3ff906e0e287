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
// UID, a new address), the removals first.
type Settler interface {
	Listener
	Settled()
}

// Resumer is a Listener told when a parked worker returns to Workers (its
// pod Ready again), after the WorkerAdded calls of the change.
type Resumer interface {
	Listener
	WorkerResumed(w *Worker)
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
	snapshot atomic.Pointer[[]*Worker]
	// all are the workers of byKey, parked ones too, ordered as snapshot.
	all   atomic.Pointer[[]*Worker]
	clock clock.PassiveClock // tells when a worker was parked
	// parked are the parked workers of all: rebuilt at a change that
	// parks, resumes or drops one.
	parked    atomic.Pointer[[]*Worker]
	listeners []Listener
	synced    atomic.Bool
	first     chan struct{} // closed by the first MarkSynced
	firstOnce sync.Once
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
	r.snapshot.Store(&[]*Worker{})
	r.all.Store(&[]*Worker{})
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
func (r *Registry) Parked() []*Worker {
	if p := r.parked.Load(); p != nil {
		return *p
	}
	return nil
}

// Workers returns the current workers, ordered by address. The slice is
// shared and must not be modified.
func (r *Registry) Workers() []*Worker { return *r.snapshot.Load() }

// AllWorkers returns the current workers and the parked ones, which are out
// of Workers while their pods are unready, ordered by address. A worker
// moves in and out of Workers as its pod flaps, never in and out of
// AllWorkers: one read sees every worker the registry holds, with the
// requests each counts, whatever its pod's readiness. The slice is shared
// and must not be modified.
func (r *Registry) AllWorkers() []*Worker { return *r.all.Load() }

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
// and takes the new rank. An Unready endpoint parks its worker, which the
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
	for _, ep := range upsert {
		r.upsertLocked(ep, &c)
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
	for _, ep := range eps {
		keep[ep.Key] = true
		r.upsertLocked(ep, &c)
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
}

func (r *Registry) upsertLocked(ep Endpoint, c *change) {
	prev := r.draining[ep.Key]
	if old, ok := r.byKey[ep.Key]; ok {
		if old.sameServer(ep) {
			old.rank.Store(int64(ep.Rank))
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
// The new snapshot is the old one with the workers out of the picks cut out
// and those into them spliced in at their places, found by binary search:
// one copy of the slice, touching only the workers that changed, never a
// sort of the whole set.
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
	r.publishAllLocked(c.removed, added)
	if len(c.parked) > 0 || len(c.resumed) > 0 || slices.ContainsFunc(c.removed, (*Worker).Parked) {
		parked := slices.DeleteFunc(slices.Clone(*r.all.Load()), func(w *Worker) bool { return !w.Parked() })
		r.parked.Store(&parked)
	}
	old := *r.snapshot.Load()
	var cut []int
	for _, ws := range [][]*Worker{c.removed, c.parked} {
		for _, w := range ws {
			if i, ok := slices.BinarySearchFunc(old, w, compareWorkers); ok && old[i] == w && !w.Live() {
				cut = append(cut, i)
			}
		}
	}
	outside := func(w *Worker) bool { // live, and not in the old snapshot
		i, ok := slices.BinarySearchFunc(old, w, compareWorkers)
		return w.Live() && (!ok || old[i] != w)
	}
	var in, back []*Worker
	for _, w := range added {
		if outside(w) {
			in = append(in, w)
		}
	}
	for _, w := range c.resumed {
		if outside(w) {
			back = append(back, w)
		}
	}
	in = append(in, back...)
	if len(added) == 0 && len(c.removed) == 0 && len(cut) == 0 && len(in) == 0 {
		return
	}
	if len(cut) > 0 || len(in) > 0 {
		r.snapshot.Store(splice(old, cut, in))
	}
	for _, l := range r.listeners {
		for _, w := range c.removed {
			l.WorkerRemoved(w)
		}
		for _, w := range added {
			l.WorkerAdded(w)
		}
		if rl, ok := l.(Resumer); ok {
			for _, w := range back {
				rl.WorkerResumed(w)
			}
		}
		if s, ok := l.(Settler); ok {
			s.Settled()
		}
	}
}

// publishAllLocked installs the workers of the registry, parked ones too,
// without those removed and with those added. Parking and resuming leave it
// as it is.
func (r *Registry) publishAllLocked(removed, added []*Worker) {
	old := *r.all.Load()
	var cut []int
	for _, w := range removed {
		if i, ok := slices.BinarySearchFunc(old, w, compareWorkers); ok && old[i] == w {
			cut = append(cut, i)
		}
	}
	if len(cut) > 0 || len(added) > 0 {
		r.all.Store(splice(old, cut, slices.Clone(added)))
	}
}

// splice returns old without the workers at the indexes cut and with the
// workers in, in order.
func splice(old []*Worker, cut []int, in []*Worker) *[]*Worker {
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
	return &ws
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

// compareWorkers orders the snapshot: by address, then by pod UID.
func compareWorkers(a, b *Worker) int {
	if c := strings.Compare(a.addr, b.addr); c != 0 {
		return c
	}
	return strings.Compare(a.ep.Key.UID, b.ep.Key.UID)
}
