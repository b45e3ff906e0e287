package flowcontrol

import "errors"

// The reasons a request leaves the queue without being dispatched. The
// caller answers each with 429 and a retry-after, except context errors
// (the client is gone).
var (
	// ErrQueueFull: the queue was at a bound and the request could not
	// take another waiter's place.
	ErrQueueFull = errors.New("flow control queue is full")
	// ErrTimeout: the request waited MaxWait without being dispatched.
	ErrTimeout = errors.New("flow control wait timed out")
	// ErrEvicted: a request of higher priority took this waiter's place.
	ErrEvicted = errors.New("evicted from the flow control queue")
	// ErrShed: a request of negative priority met a saturated pool; such
	// requests are never queued.
	ErrShed = errors.New("shed under saturation")
	// ErrStopped: the queue's dispatcher has stopped.
	ErrStopped = errors.New("flow control queue stopped")
)

// Outcome labels of the outcome counter.
const (
	outcomeDispatched = "dispatched"
	outcomeShed       = "shed"
	outcomeFull       = "full"
	outcomeEvicted    = "evicted"
	outcomeTimeout    = "timeout"
	outcomeCancelled  = "cancelled"
	outcomeError      = "error"
)
