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

// dispatch tries head-of-line waiters in order until one finds no capacity
// or the queue is empty.
func (q *Queue) dispatch(ctx context.Context) {
	for ctx.Err() == nil {
		q.mu.Lock()
		w := q.bands.head()
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
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
}

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
