package flowcontrol

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Priorities maps InferenceObjective names to their priority: an
// objective's own, else the static one (--objective-priorities). Reads take
// no lock: they load an immutable map that every write replaces.
type Priorities struct {
	mu     sync.Mutex // serializes writers; guards static and set
	static map[string]int
	set    map[string]struct{} // names an objective gives a priority
	m      atomic.Pointer[map[string]int]
}

// NewPriorities returns an empty lookup.
func NewPriorities() *Priorities {
	p := &Priorities{static: map[string]int{}, set: map[string]struct{}{}}
	p.m.Store(&map[string]int{})
	return p
}

// Priority returns the priority of the named objective, and whether the
// objective is known.
func (p *Priorities) Priority(name string) (int, bool) {
	v, ok := (*p.m.Load())[name]
	return v, ok
}

// SetStatic records the priority the name has while no objective gives it
// one.
func (p *Priorities) SetStatic(name string, prio int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.static[name] = prio
	if _, ok := p.set[name]; !ok {
		p.publish(name, prio, true)
	}
}

// Set records the priority the named objective gives.
func (p *Priorities) Set(name string, prio int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.set[name] = struct{}{}
	p.publish(name, prio, true)
}

// Delete drops what the named objective gave: the name goes back to its
// static priority, if it has one, and is otherwise forgotten.
func (p *Priorities) Delete(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.set, name)
	prio, ok := p.static[name]
	p.publish(name, prio, ok)
}

// publish makes the name's priority prio (known) or unknown, replacing the
// map only when that changes it.
func (p *Priorities) publish(name string, prio int, known bool) {
	old := *p.m.Load()
	if v, ok := old[name]; ok == known && (!known || v == prio) {
		return
	}
	next := maps.Clone(old)
	if known {
		next[name] = prio
	} else {
		delete(next, name)
	}
	p.m.Store(&next)
}
