package flowcontrol

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// Item describes a request to the queue.
type Item struct {
	// Priority orders bands: higher first. Negative priorities are shed,
	// never queued, when the pool is saturated.
	Priority int
	// FlowID is the fairness id (x-gateway-inference-fairness-id); flows of
	// one band take turns.
	FlowID string
	// Bytes is the size of the buffered request, counted against MaxBytes.
	Bytes int64
	// Model and TargetModel (the model asked for, and the one served after
	// any rewrite) label the upstream-compatible series; may be empty.
	Model, TargetModel string
	// Endpoints names where the request may go: its target model, then,
	// after a NUL byte, any subset hint, then, after two NUL bytes, any
	// context-length ranges that hold its prompt. Requests with the same Endpoints
	// are picked among the same endpoints. Once one of them finds no
	// capacity, a dispatch goes on to requests whose endpoints differ
	// instead of stopping, so that a model whose endpoints are full does
	// not hold back the others. Requests for the same target model, or
	// one of whose Endpoints is empty (one set for all), may go to the
	// same endpoints: a request is not tried ahead of such a request of
	// the same or a higher priority that waits.
	Endpoints string
	// Deadline is when the request's time-to-first-token objective runs
	// out: its arrival plus its x-slo-ttft-ms; zero for none. With
	// Options.Ordering OrderDeadline its flow serves it by that.
	Deadline time.Time
}

// TryFunc attempts to dispatch a request: pick an endpoint and take its load
// guard. ok=false means no capacity right now (the request may wait); an
// error ends the request with that error. It is called without any lock of
// the queue held, from the caller of Admit or from the dispatcher, and never
// concurrently for the same request.
type TryFunc func() (ok bool, err error)

// Queue is the flow-control queue between parsing a request and picking its
// endpoint. A queued request holds no load guard: the guard is taken inside
// the successful TryFunc.
type Queue struct {
	opts    Options
	clock   clock.WithTicker
	metrics *metrics

	reg        prometheus.Registerer
	pool       string
	saturation func() float64

	waiting atomic.Int64  // waiters queued; 0 lets Admit try without the lock
	kick    chan struct{} // capacity may have freed; capacity 1
	stopped chan struct{}

	mu    sync.Mutex
	bands bands
	seq   uint64
	down  bool

	// The dispatcher's: endpoints found full this round, and since the
	// sweep began; where the sweep stopped.
	full    map[string]struct{}
	swept   map[string]struct{}
	cursor  cursor
	current *waiter // the waiter whose try is running
}

// Option configures a Queue.
type Option func(*Queue)

// WithClock sets the clock used for MaxWait and wait times.
func WithClock(c clock.WithTicker) Option { return func(q *Queue) { q.clock = c } }

// WithRegisterer registers the queue's metrics; labels series with pool.
func WithRegisterer(reg prometheus.Registerer, pool string) Option {
	return func(q *Queue) { q.reg, q.pool = reg, pool }
}

// WithSaturation exports saturation, read at scrape time, as the upstream
// EPP's pool-saturation gauge: how near the pool's endpoints are to taking
// no more work, 0 idle and 1 saturated.
func WithSaturation(saturation func() float64) Option {
	return func(q *Queue) { q.saturation = saturation }
}

// New returns a queue with the given bounds; zero bounds take defaults.
func New(opts Options, o ...Option) (*Queue, error) {
	opts.Complete()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("flow control options: %w", err)
	}
	q := &Queue{
		opts:    opts,
		clock:   clock.RealClock{},
		kick:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		bands:   newBands(opts.Ordering == OrderDeadline),
		full:    map[string]struct{}{},
		swept:   map[string]struct{}{},
	}
	for _, f := range o {
		f(q)
	}
	q.metrics = newMetrics(q.reg, q.pool, q.saturation)
	return q, nil
}

// Admit returns nil once try has succeeded for this request, so the caller
// owns whatever try took (the load guard). When no request that may go to
// the same endpoints with the same or a higher priority waits (see
// Item.Endpoints), try runs at once, and if it succeeds the request never
// enters the queue. Otherwise the request waits until a dispatch attempt
// succeeds, or returns ctx.Err() (the request left the queue at once),
// ErrTimeout, ErrEvicted, ErrQueueFull, ErrShed, ErrStopped, or the error
// try returned. A request of negative priority never waits: it is shed when
// it cannot be dispatched at once.
func (q *Queue) Admit(ctx context.Context, it Item, try TryFunc) error {
	if q.waiting.Load() == 0 || q.nothingAhead(it) {
		ok, err := try()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
	}
	start := q.clock.Now()
	if it.Priority < 0 {
		q.metrics.enqueued(it, upstreamOutcomes[outcomeShed], q.clock.Since(start).Seconds())
		q.metrics.done(it, outcomeShed, 0)
		return ErrShed
	}
	w, err := q.enqueue(it, try)
	if err != nil {
		q.metrics.enqueued(it, upstreamOutcomes[outcomeOf(err)], q.clock.Since(start).Seconds())
		q.metrics.done(it, outcomeOf(err), 0)
		return err
	}
	q.metrics.enqueued(it, outcomeQueued, q.clock.Since(start).Seconds())
	q.Notify()
	timer := q.clock.NewTimer(q.opts.MaxWait)
	defer timer.Stop()
	var res error
	select {
	case res = <-w.done:
	case <-ctx.Done():
		res = q.leave(w, ctx.Err())
	case <-timer.C():
		res = q.leave(w, ErrTimeout)
	case <-q.stopped:
		res = q.leave(w, ErrStopped)
	}
	q.metrics.done(it, outcomeOf(res), q.clock.Since(start).Seconds())
	return res
}

// nothingAhead reports whether no waiter should have its places first.
func (q *Queue) nothingAhead(it Item) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.bands.ahead(it.Priority, it.Endpoints)
}

// Notify tells the queue that capacity may have freed: a load guard was
// released, a scrape showed room, an endpoint joined. It never blocks.
func (q *Queue) Notify() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Len returns the number of waiting requests.
func (q *Queue) Len() int { return int(q.waiting.Load()) }

// ByDeadline reports whether each flow serves its waiters by their
// deadlines (Options.Ordering OrderDeadline).
func (q *Queue) ByDeadline() bool { return q.bands.byDeadline }

func (q *Queue) enqueue(it Item, try TryFunc) (*waiter, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.down {
		return nil, ErrStopped
	}
	// A full band takes a request of a flow that holds fewer places than
	// another in place of that flow's newest waiter, so that one flow's
	// burst cannot keep the others of its priority out.
	var pushed *waiter
	if b := q.bands.band(it.Priority); b.len >= q.opts.MaxBandLen {
		if pushed = b.pushOut(it.FlowID); pushed == nil {
			return nil, ErrQueueFull
		}
	}
	if !q.roomLocked(it, pushed) {
		return nil, ErrQueueFull
	}
	if pushed != nil {
		q.removeLocked(pushed, false)
		pushed.done <- ErrQueueFull
	}
	for q.bands.len+1 > q.opts.MaxLen || q.bands.bytes+it.Bytes > q.opts.MaxBytes {
		v := q.bands.victim(it.Priority)
		if v == nil {
			return nil, ErrQueueFull
		}
		q.removeLocked(v, false)
		v.done <- ErrEvicted
	}
	// The metrics first: should they panic (a label they refuse), no waiter
	// is left behind for a request that never learns it was queued.
	q.metrics.queued(it, 1)
	q.seq++
	w := &waiter{item: it, try: try, seq: q.seq, done: make(chan error, 1)}
	q.bands.push(w)
	q.waiting.Add(1)
	return w, nil
}

// roomLocked reports whether it fits in the queue once pushed (the waiter
// of its band it pushes out, or nil) and every waiter it may evict (those
// of lower priorities, but the one being tried) are gone, so that no
// waiter is pushed out or evicted for a request that is refused anyway.
func (q *Queue) roomLocked(it Item, pushed *waiter) bool {
	if it.Bytes > q.opts.MaxBytes {
		return false
	}
	n, bytes := q.bands.len, q.bands.bytes
	if pushed != nil {
		n--
		bytes -= pushed.item.Bytes
	}
	if n+1 <= q.opts.MaxLen && bytes+it.Bytes <= q.opts.MaxBytes {
		return true
	}
	below, belowBytes := q.bands.below(it.Priority)
	if c := q.current; c != nil && c.item.Priority < it.Priority {
		below--
		belowBytes -= c.item.Bytes
	}
	return n-below < q.opts.MaxLen && bytes-belowBytes+it.Bytes <= q.opts.MaxBytes
}

func (q *Queue) removeLocked(w *waiter, advance bool) {
	if w.removed {
		return
	}
	q.bands.remove(w, advance)
	q.waiting.Add(-1)
	q.metrics.queued(w.item, -1)
}

// leave takes a waiter out of the queue because its request stopped
// waiting. If the dispatcher is running its try, leave waits for that
// outcome: a success wins, since the caller then owns a guard.
func (q *Queue) leave(w *waiter, reason error) error {
	q.mu.Lock()
	if w.trying {
		w.left = true
		q.mu.Unlock()
		if err := <-w.done; err == nil {
			return nil
		}
		return reason
	}
	if w.removed {
		// Dispatched or evicted just before the request left.
		q.mu.Unlock()
		return <-w.done
	}
	q.removeLocked(w, false)
	q.mu.Unlock()
	return reason
}
