package extproc

import "sync/atomic"

// initialBodyBytes is the most a stream reserves for its body before the
// bytes arrive, whatever content-length the request declares. Past it the
// buffer grows with what was received (at most doubling), so a declared
// length reserves nothing a client has not sent.
const initialBodyBytes = 64 << 10

// maxPooledBody is the largest body buffer kept for the next stream: reusing
// it spares large requests their growth copies. A routed request lets a
// buffer past keptBodyBytes go once its body went upstream (its response
// may stream for minutes), so only the buffers of requests that ended
// before that are kept this large.
const maxPooledBody = 1 << 20

// DefaultMaxBufferedBodyBytes is the budget for request bodies buffered
// across all streams when Options.MaxBufferedBodyBytes is 0: a quarter of
// the chart's 1 GiB memory limit.
const DefaultMaxBufferedBodyBytes = 256 << 20

// bodyBudget is the memory all streams together may hold in buffered request
// bodies. A stream takes from it before its buffer grows and gives back what
// it took when it ends.
type bodyBudget struct {
	limit int64
	used  atomic.Int64
}

// take reserves n bytes, or reports false when that would pass the limit.
func (b *bodyBudget) take(n int) bool {
	for {
		used := b.used.Load()
		if used+int64(n) > b.limit {
			return false
		}
		if b.used.CompareAndSwap(used, used+int64(n)) {
			return true
		}
	}
}

// give returns n reserved bytes.
func (b *bodyBudget) give(n int) { b.used.Add(-int64(n)) }

// Used returns the bytes reserved now.
func (b *bodyBudget) Used() int64 { return b.used.Load() }

// grow makes room in body for n more bytes. reserved is what the stream has
// taken from b so far (at least cap(body) once the stream has buffered
// anything); grow takes what a larger buffer needs beyond it. hint is the
// declared length (0 when unknown): the buffer grows to it rather than past
// it, and never to more than twice what it held. ok is false when the budget
// cannot cover even the bytes received.
func (b *bodyBudget) grow(body []byte, reserved, n, hint int) (out []byte, newReserved int, ok bool) {
	need := len(body) + n
	if need <= cap(body) {
		if cap(body) <= reserved {
			return body, reserved, true
		}
		// A pooled buffer, used for the first time by this stream: hold it
		// if the budget covers it, else leave it and start a small one.
		if b.take(cap(body) - reserved) {
			return body, cap(body), true
		}
		body = body[:len(body):len(body)]
	}
	target := max(need, 2*cap(body))
	if cap(body) == 0 {
		target = max(need, min(hint, initialBodyBytes))
	}
	if hint >= need {
		target = min(target, hint)
	}
	if !b.take(target - reserved) {
		if target == need || !b.take(need-reserved) {
			return body, reserved, false
		}
		target = need
	}
	nb := make([]byte, len(body), target)
	copy(nb, body)
	return nb, target, true
}
