package policy

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/inferpick/inferpick/picker/registry"
)

// perWorker keeps a T for each worker of a registry: a zero T made when
// the worker joins and dropped when it leaves (a parked worker keeps its
// own), so that what a policy remembers of a worker is that worker's alone
// for its life and no longer. Picks find a worker's T through a map
// published whole at each change of the pool: a lookup takes no lock and
// allocates nothing; what a T holds guards itself.
type perWorker[T any] struct {
	// byID are the workers' values by ID (unique for the life of the
	// process), as published.
	byID atomic.Pointer[map[uint32]*T]

	mu    sync.Mutex // serializes the registry's calls and follow
	next  map[uint32]*T
	dirty bool // next differs from byID
}

var _ registry.Settler = (*perWorker[int])(nil)

// follow makes t keep a T for each of reg's workers, those present now
// and those that join later.
func (t *perWorker[T]) follow(reg *registry.Registry) {
	t.mu.Lock()
	t.next = map[uint32]*T{}
	t.byID.Store(&map[uint32]*T{})
	t.mu.Unlock()
	reg.AddListener(t)
	t.Settled()
}

// WorkerAdded makes w's T.
func (t *perWorker[T]) WorkerAdded(w *registry.Worker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next[w.ID()] = new(T)
	t.dirty = true
}

// WorkerRemoved drops w's T.
func (t *perWorker[T]) WorkerRemoved(w *registry.Worker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.next, w.ID())
	t.dirty = true
}

// Settled publishes the values of the workers as they are now.
func (t *perWorker[T]) Settled() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dirty {
		t.dirty = false
		m := maps.Clone(t.next)
		t.byID.Store(&m)
	}
}

// all returns the published values by worker ID, for a pick that reads
// many; the map must not be modified.
func (t *perWorker[T]) all() map[uint32]*T { return *t.byID.Load() }

// of returns w's T, or nil for a worker whose joining has not settled yet
// (or that has left).
func (t *perWorker[T]) of(w *registry.Worker) *T { return t.all()[w.ID()] }
