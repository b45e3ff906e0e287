package flowcontrol

import (
	"context"
	"errors"
)

// Start runs the dispatcher until ctx ends; it is a manager Runnable.
//
// One goroutine dispatches, for three reasons: try runs a pick, and picks
// for queued requests must happen in queue order, which concurrent
// dispatchers could not keep; a release path that calls Notify must not
// run someone else's pick; and the queue's lock is never held while try
// runs, so a slow pick delays only the dispatcher, never Admit or a
// leaving request. When Start returns, every waiter gets ErrStopped.
func (q *Queue) Start(ctx context.Context) error {
	defer q.stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-q.kick:
			q.dispatch(ctx)
		}
	}
}

func (q *Queue) stop() {
	q.mu.Lock()
	q.down = true
	q.mu.Unlock()
	close(q.stopped)
}

// dispatch tries waiters in order until the queue is empty or no waiter
// left is worth a try: a waiter whose endpoints (Item.Endpoints) found no
// capacity is passed over, since its try would fail too (a later waiter of
// the same endpoints has the same or a lower priority, whose limits are no
// looser).
//
// A round has two parts, each bounded. It first goes from the head of the
// queue, so that the first waiters get whatever capacity freed, until
// maxFullPerRound endpoint sets were found full or scanLimit waiters were
// looked at. Then it goes on with the sweep: a walk through the whole queue
// that each round takes up where the last one stopped, passing over the
// endpoints it found full since it began, until another maxFullPerRound
// sets are found full or scanLimit more waiters looked at. A sweep left
// unfinished goes on in the next round, which every wake-up starts (a
// release, an arrival, an endpoint joining, and the scrape-interval tick
// when the picker runs the queue), so a waiter behind any number of full
// endpoint sets is tried, while each wake-up costs at most two bounded
// parts however long the queue.
func (q *Queue) dispatch(ctx context.Context) {
	start := q.clock.Now()
	defer func() { q.metrics.upCycle.Observe(q.clock.Since(start).Seconds()) }()
	clear(q.full)
	head := func() (*waiter, bool) {
		w, rest := q.bands.next(q.full, scanLimit)
		// With every waiter left found full this round, the sweep too has
		// nothing to find.
		return w, w == nil && !rest
	}
	sweep := func() (*waiter, bool) { return q.bands.sweep(&q.cursor, q.swept, scanLimit) }
	if !q.part(ctx, head) {
		q.part(ctx, sweep)
	}
}

// part tries the waiters next gives, with q.mu held while next runs, until
// it gives none, maxFullPerRound endpoint sets were found full or ctx ends.
// It reports whether next said nothing is left to try (the sweep then ends).
func (q *Queue) part(ctx context.Context, next func() (w *waiter, done bool)) bool {
	found := 0
	for ctx.Err() == nil {
		q.mu.Lock()
		w, done := next()
		if done {
			q.endSweepLocked()
			q.mu.Unlock()
			return true
		}
		if w == nil {
			q.mu.Unlock()
			return false
		}
		if q.attempt(w) {
			found++
			if found >= maxFullPerRound {
				return false
			}
		}
	}
	return false
}

// attempt runs w's try without the lock and settles its outcome; it reports
// whether w's endpoints were found full. It is called with q.mu held, which
// it releases.
func (q *Queue) attempt(w *waiter) (full bool) {
	w.trying = true
	q.current = w
	q.mu.Unlock()

	ok, err := w.try()

	q.mu.Lock()
	defer q.mu.Unlock()
	w.trying = false
	q.current = nil
	switch {
	case err != nil:
		q.removeLocked(w, true)
		w.done <- err
	case ok:
		q.removeLocked(w, true)
		w.done <- nil
	case w.left:
		q.removeLocked(w, false)
		w.done <- errLeft
	default:
		q.full[w.item.Endpoints] = struct{}{}
		q.swept[w.item.Endpoints] = struct{}{}
		return true
	}
	return false
}

// endSweepLocked starts the next sweep at the head of the queue.
func (q *Queue) endSweepLocked() {
	q.cursor = cursor{}
	clear(q.swept)
}

// A dispatch round tries, in each of its two parts, waiters of at most
// maxFullPerRound endpoint sets that turn out full, and looks at most
// scanLimit waiters past them for the next to try: a queue of many waiters
// for full endpoints costs a bounded amount each round.
const (
	maxFullPerRound = 16
	scanLimit       = 1024
)

// errLeft answers a waiter whose request left while its try was running.
var errLeft = errors.New("left the queue")

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return outcomeDispatched
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeCancelled
	case errors.Is(err, ErrTimeout):
		return outcomeTimeout
	case errors.Is(err, ErrEvicted):
		return outcomeEvicted
	case errors.Is(err, ErrQueueFull):
		return outcomeFull
	default:
		return outcomeError
	}
}
