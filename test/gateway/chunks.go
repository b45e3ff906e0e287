package gateway

import (
	"context"
	"errors"
	"io"
	"sync"
)

// errChunkAfterEnd is a body reply after the one that ended the body.
var errChunkAfterEnd = errors.New("body chunk after end_of_stream")

// chunkQueue holds the body chunks the picker streams back for one direction. It
// keeps every chunk so that each upstream attempt replays the body from the start,
// as Envoy's router does with the body it buffered for retries.
type chunkQueue struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	chunks  [][]byte
	ended   bool
	err     error
}

func newChunkQueue() *chunkQueue { return &chunkQueue{changed: make(chan struct{})} }

func (q *chunkQueue) notifyLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
}

func (q *chunkQueue) append(b []byte, end bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended {
		return errChunkAfterEnd
	}
	if len(b) > 0 {
		q.chunks = append(q.chunks, b)
	}
	q.ended = end
	q.notifyLocked()
	return nil
}

// fail wakes every reader with err unless the body already ended.
func (q *chunkQueue) fail(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err == nil && !q.ended {
		q.err = err
		q.notifyLocked()
	}
}

// next returns chunk i, waiting for it; io.EOF after the last one.
func (q *chunkQueue) next(ctx context.Context, i int) ([]byte, error) {
	for {
		q.mu.Lock()
		switch {
		case i < len(q.chunks):
			b := q.chunks[i]
			q.mu.Unlock()
			return b, nil
		case q.ended:
			q.mu.Unlock()
			return nil, io.EOF
		case q.err != nil:
			err := q.err
			q.mu.Unlock()
			return nil, err
		}
		changed := q.changed
		q.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// reader returns a fresh reader over the whole body.
func (q *chunkQueue) reader(ctx context.Context) io.ReadCloser {
	return &queueReader{ctx: ctx, q: q}
}

type queueReader struct {
	ctx  context.Context
	q    *chunkQueue
	next int
	cur  []byte
}

func (r *queueReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		b, err := r.q.next(r.ctx, r.next)
		if err != nil {
			return 0, err
		}
		r.next++
		r.cur = b
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

func (r *queueReader) Close() error { return nil }
