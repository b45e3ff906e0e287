package flowcontrol

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Priorities maps InferenceObjective names to their priority. Reads take
// no lock: they load an immutable map that every write replaces.
type Priorities struct {
	mu sync.Mutex // serializes writers
	m  atomic.Pointer[map[string]int]
}

// NewPriorities returns an empty lookup.
func NewPriorities() *Priorities {
	p := &Priorities{}
	p.m.Store(&map[string]int{})
	return p
}

// Priority returns the priority of the named objective, and whether the
// objective is known.
func (p *Priorities) Priority(name string) (int, bool) {
	v, ok := (*p.m.Load())[name]
	return v, ok
}

// Set records the priority of the named objective.
func (p *Priorities) Set(name string, prio int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.m.Load()
	if v, ok := old[name]; ok && v == prio {
		return
	}
	next := maps.Clone(old)
	next[name] = prio
	p.m.Store(&next)
}

// Delete forgets the named objective.
func (p *Priorities) Delete(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.m.Load()
	if _, ok := old[name]; !ok {
		return
	}
	next := maps.Clone(old)
	delete(next, name)
	p.m.Store(&next)
}
