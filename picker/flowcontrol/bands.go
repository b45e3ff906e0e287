package flowcontrol

import (
	"cmp"
	"slices"
	"sort"
	"strings"
	"time"
)

// waiter is one queued request. Its fields are guarded by Queue.mu, except
// done, which receives the outcome exactly once.
type waiter struct {
	item    Item
	try     TryFunc
	seq     uint64
	flow    *flow
	trying  bool // the dispatcher is running try without the lock
	left    bool // the request stopped waiting while try was running
	removed bool
	done    chan error
}

// flow is the line of one fairness id within one band, in the order its
// waiters are served: first come, first served, or by deadline (see
// bands.compare).
type flow struct {
	id      string
	waiters []*waiter
	band    *band
}

// band holds the flows of one priority, served round-robin.
type band struct {
	priority int
	flows    map[string]*flow
	ring     []*flow // flows with waiters, in the order they are served
	next     int
	len      int
	bytes    int64
	models   map[string]int // waiters by the target model of Item.Endpoints
}

// bands keeps every band ordered by priority, highest first.
type bands struct {
	// byDeadline orders each flow by its waiters' deadlines
	// (OrderDeadline) rather than by their arrival.
	byDeadline bool
	byPrio     map[int]*band
	order      []*band
	len        int
	bytes      int64
	endpoints  map[string]int // waiters by Item.Endpoints
}

func newBands(byDeadline bool) bands {
	return bands{byDeadline: byDeadline, byPrio: map[int]*band{}, endpoints: map[string]int{}}
}

// place is where a waiter stands in its flow's order: its deadline (zero
// for none) and its arrival.
type place struct {
	deadline time.Time
	seq      uint64
}

func (w *waiter) place() place { return place{deadline: w.item.Deadline, seq: w.seq} }

// compare orders two places of a flow: by arrival alone, or, byDeadline,
// by deadline first, those without one after every one with, then by
// arrival. It is negative when a is served before b.
func (bs *bands) compare(a, b place) int {
	if bs.byDeadline {
		switch az, bz := a.deadline.IsZero(), b.deadline.IsZero(); {
		case az && !bz:
			return 1
		case bz && !az:
			return -1
		case !az:
			if c := a.deadline.Compare(b.deadline); c != 0 {
				return c
			}
		}
	}
	return cmp.Compare(a.seq, b.seq)
}

func (bs *bands) band(prio int) *band {
	if b, ok := bs.byPrio[prio]; ok {
		return b
	}
	b := &band{priority: prio, flows: map[string]*flow{}, models: map[string]int{}}
	bs.byPrio[prio] = b
	bs.order = append(bs.order, b)
	sort.Slice(bs.order, func(i, j int) bool { return bs.order[i].priority > bs.order[j].priority })
	return b
}

func (bs *bands) push(w *waiter) {
	b := bs.band(w.item.Priority)
	f, ok := b.flows[w.item.FlowID]
	if !ok {
		f = &flow{id: w.item.FlowID, band: b}
		b.flows[w.item.FlowID] = f
	}
	if len(f.waiters) == 0 {
		b.ring = append(b.ring, f)
	}
	// Under FCFS the newest comes last; by deadline its place is found
	// by bisection, after every waiter it does not come before.
	i := len(f.waiters)
	if bs.byDeadline {
		at := w.place()
		i, _ = slices.BinarySearchFunc(f.waiters, at, func(x *waiter, at place) int { return bs.compare(x.place(), at) })
	}
	f.waiters = slices.Insert(f.waiters, i, w)
	w.flow = f
	b.len++
	b.bytes += w.item.Bytes
	bs.len++
	bs.bytes += w.item.Bytes
	bs.endpoints[w.item.Endpoints]++
	b.models[modelOf(w.item.Endpoints)]++
}

// head returns the next waiter to dispatch: the highest band with waiters,
// its current flow in the ring, that flow's first waiter.
func (bs *bands) head() *waiter {
	for _, b := range bs.order {
		if len(b.ring) == 0 {
			continue
		}
		if b.next >= len(b.ring) {
			b.next = 0
		}
		return b.ring[b.next].waiters[0]
	}
	return nil
}

// next returns the first waiter in dispatch order whose endpoints are not
// in full, looking at no more than limit waiters: the bands by priority,
// each band's flows from its current one round the ring, each flow's
// waiters in its order. It is head when full is empty. rest is false when
// no waiter is left whose endpoints are not in full, true when next
// stopped at limit.
func (bs *bands) next(full map[string]struct{}, limit int) (w *waiter, rest bool) {
	if len(full) == 0 {
		return bs.head(), false
	}
	if bs.allIn(full) {
		return nil, false
	}
	for _, b := range bs.order {
		for i := range b.ring {
			for _, w := range b.ring[(b.next+i)%len(b.ring)].waiters {
				if _, ok := full[w.item.Endpoints]; !ok {
					return w, false
				}
				limit--
				if limit == 0 {
					return nil, true
				}
			}
		}
	}
	return nil, false
}

// cursor is where a sweep (sweep) stopped: after the waiter at place at
// of flow (at index idx of its band's ring) in the band of priority prio.
type cursor struct {
	started bool
	prio    int
	flow    *flow
	idx     int
	at      place
}

// sweep goes on from c through the waiters, looking at no more than limit,
// and returns the first whose endpoints are not in full; c moves past every
// waiter it looks at. It walks the bands by priority, each band's ring in
// its order, each flow's waiters in its order, so that successive calls
// reach every waiter however long the queue; end is true once the walk has
// passed the last waiter (c is then reset). A waiter that joined its flow
// ahead of the cursor (an earlier deadline) is reached by the next walk.
//
// A flow emptied since c was set has left the ring, and the flows after it
// moved down one place: the walk goes on at the same index.
func (bs *bands) sweep(c *cursor, full map[string]struct{}, limit int) (w *waiter, end bool) {
	for _, b := range bs.order {
		start, resume := 0, false // resume: skip start's waiters up to c.at
		if c.started {
			if b.priority > c.prio {
				continue
			}
			if b.priority == c.prio {
				start = min(c.idx, len(b.ring))
				if start < len(b.ring) && b.ring[start] == c.flow {
					resume = true
				} else if i := slices.Index(b.ring, c.flow); i >= 0 {
					start, resume = i, true
				}
			}
		}
		for i := start; i < len(b.ring); i++ {
			f := b.ring[i]
			for _, w := range f.waiters {
				if resume && i == start && bs.compare(w.place(), c.at) <= 0 {
					continue
				}
				prev := *c
				*c = cursor{started: true, prio: b.priority, flow: f, idx: i, at: w.place()}
				if _, ok := full[w.item.Endpoints]; !ok {
					if x := bs.before(w, full); x != nil {
						// The sweep comes back to w once x is tried.
						*c = prev
						return x, false
					}
					return w, false
				}
				limit--
				if limit == 0 {
					return nil, false
				}
			}
		}
	}
	*c = cursor{}
	return nil, true
}

// before returns the first waiter, in dispatch order, of a band above w's
// that may go where w may go (as in ahead) and whose endpoints are not in
// full, looking at no more than scanLimit waiters; else nil. A sweep tries
// it in w's place: a request of a higher priority that came after the
// sweep passed its place still goes first.
func (bs *bands) before(w *waiter, full map[string]struct{}) *waiter {
	m := modelOf(w.item.Endpoints)
	limit := scanLimit
	for _, b := range bs.order {
		if b.priority <= w.item.Priority {
			return nil
		}
		if b.len == 0 || m != "" && b.models[m] == 0 && b.models[""] == 0 {
			continue
		}
		for i := range b.ring {
			for _, x := range b.ring[(b.next+i)%len(b.ring)].waiters {
				if _, ok := full[x.item.Endpoints]; !ok {
					if xm := modelOf(x.item.Endpoints); m == "" || xm == "" || xm == m {
						return x
					}
				}
				limit--
				if limit == 0 {
					return nil
				}
			}
		}
	}
	return nil
}

// allIn reports whether every waiter's endpoints are in full.
func (bs *bands) allIn(full map[string]struct{}) bool {
	for k := range bs.endpoints {
		if _, ok := full[k]; !ok {
			return false
		}
	}
	return true
}

// remove takes w out of its flow; the band's ring moves on to the next flow
// when w was dispatched from the head (advance), so flows take turns.
func (bs *bands) remove(w *waiter, advance bool) {
	if w.removed {
		return
	}
	w.removed = true
	f := w.flow
	b := f.band
	for i, x := range f.waiters {
		if x == w {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			break
		}
	}
	b.len--
	b.bytes -= w.item.Bytes
	bs.len--
	bs.bytes -= w.item.Bytes
	bs.endpoints[w.item.Endpoints]--
	if bs.endpoints[w.item.Endpoints] == 0 {
		delete(bs.endpoints, w.item.Endpoints)
	}
	m := modelOf(w.item.Endpoints)
	b.models[m]--
	if b.models[m] == 0 {
		delete(b.models, m)
	}
	idx := -1
	for i, x := range b.ring {
		if x == f {
			idx = i
			break
		}
	}
	if len(f.waiters) == 0 {
		b.ring = append(b.ring[:idx], b.ring[idx+1:]...)
		delete(b.flows, f.id)
		if idx < b.next {
			b.next--
		}
		return
	}
	if advance && idx == b.next {
		b.next++
	}
}

// pushOut returns the waiter that a request of flow id takes the place of
// in the full band b: the last waiter in its flow's order (the newest
// under FCFS), not being tried, of the flow holding the most places (of
// those, the one whose last came last), when flow id holds fewer; else
// nil.
func (b *band) pushOut(id string) *waiter {
	own := 0
	if f := b.flows[id]; f != nil {
		own = len(f.waiters)
	}
	most := 0
	for _, f := range b.ring {
		most = max(most, len(f.waiters))
	}
	if own >= most {
		return nil
	}
	return b.newestIdle(most)
}

// newestIdle returns, of the flows of b holding at least n places, the
// last waiter in its flow's order not being tried (the newest under FCFS)
// that came last, or nil.
func (b *band) newestIdle(n int) *waiter {
	var newest *waiter
	for _, f := range b.ring {
		if len(f.waiters) < n {
			continue
		}
		for j := len(f.waiters) - 1; j >= 0; j-- {
			if w := f.waiters[j]; !w.trying {
				if newest == nil || w.seq > newest.seq {
					newest = w
				}
				break
			}
		}
	}
	return newest
}

// ahead reports whether a waiter of priority prio or higher may go where a
// request for endpoints may go: its endpoints name the same target model,
// or either names none (one set for all).
func (bs *bands) ahead(prio int, endpoints string) bool {
	m := modelOf(endpoints)
	for _, b := range bs.order {
		if b.priority < prio {
			return false
		}
		if b.len > 0 && (m == "" || b.models[m] > 0 || b.models[""] > 0) {
			return true
		}
	}
	return false
}

// modelOf is the target model of an Item.Endpoints: the part before a NUL
// byte, which a subset hint follows.
func modelOf(endpoints string) string {
	if i := strings.IndexByte(endpoints, 0); i >= 0 {
		return endpoints[:i]
	}
	return endpoints
}

// below returns the waiters of the bands below prio, and their bytes.
func (bs *bands) below(prio int) (n int, bytes int64) {
	for _, b := range bs.order {
		if b.priority < prio {
			n += b.len
			bytes += b.bytes
		}
	}
	return n, bytes
}

// victim returns the newest waiter (newestIdle) of the lowest band below
// prio that has one not being tried, or nil.
func (bs *bands) victim(prio int) *waiter {
	for i := len(bs.order) - 1; i >= 0; i-- {
		b := bs.order[i]
		if b.priority >= prio {
			return nil
		}
		if newest := b.newestIdle(0); newest != nil {
			return newest
		}
	}
	return nil
}
