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
// capacity in this round is passed over, since its try would fail too (a
// later waiter of the same endpoints has the same or a lower priority, whose
// limits are no looser). The round ends after maxFullPerRound such failures,
// or after looking at scanLimit waiters for one to try.
func (q *Queue) dispatch(ctx context.Context) {
	clear(q.full)
	for ctx.Err() == nil {
		q.mu.Lock()
		w := q.bands.next(q.full, scanLimit)
		if w == nil {
			q.mu.Unlock()
			return
		}
		w.trying = true
		q.mu.Unlock()

		ok, err := w.try()

		q.mu.Lock()
		w.trying = false
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
			if len(q.full) >= maxFullPerRound {
				q.mu.Unlock()
				return
			}
		}
		q.mu.Unlock()
	}
}

// A dispatch round tries waiters of at most maxFullPerRound endpoint sets
// that turn out full, and looks at most scanLimit waiters past them for the
// next to try: a queue of many waiters for full endpoints costs a bounded
// amount each time capacity frees anywhere.
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
