package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// errGatewayClosed ends the wait of a queued request whose gateway closed
// its side of the stream. Envoy closes a side stream so when the client went
// away (ext_proc_graceful_grpc_close) and resets it only after a timeout;
// the request can no longer be answered, and leaves the queue as a
// cancelled one does, never to be dispatched.
var errGatewayClosed = fmt.Errorf("the gateway closed the stream while the request waited: %w", context.Canceled)

// closeWatcher is a stream that tells a queued request of the gateway's
// close itself: its wait context ends with errGatewayClosed then, as well as
// when the stream's own context ends (at a reset).
type closeWatcher interface {
	waitContext() context.Context
}

// messageReceiver is a stream the exchange reads with RecvMsg (the grpc
// transport): only a receive tells of the gateway's close.
type messageReceiver interface {
	RecvMsg(m any) error
}

// waitContext is the context the request waits in the flow-control queue
// with.
func (x *exchange) waitContext() context.Context {
	switch s := x.stream.(type) {
	case closeWatcher:
		return s.waitContext()
	case messageReceiver:
		x.wait = recvWait{stream: x.stream, recv: s}
		return &x.wait
	}
	return x.stream.Context()
}

// recvWait is the wait context of a stream read with RecvMsg. Once the
// request waits (the queue asks for Done), a goroutine receives the stream's
// next message ahead of the exchange, and the wait ends when that receive
// fails: the gateway closed its side, or the stream ended. A message
// received (the rest of an upload routed on its front, the response headers
// of a reply the gateway made) is kept for the exchange, which takes it as
// its next (receive); the goroutine then watches the stream's context, so
// that a reset after it still ends the wait.
type recvWait struct {
	stream replySink
	recv   messageReceiver
	ahead  *received // set once the request waits
}

// received is the outcome of a receive made ahead of the exchange. The
// goroutine that receives owns in and err until done closes; it never
// touches the exchange, which may be serving another stream by the time a
// receive ends after its own stream ended.
type received struct {
	in     *inbound
	err    error
	failed chan struct{} // closed when the receive fails, before done, or when the stream ends after a message
	done   chan struct{}
}

func (w *recvWait) Deadline() (time.Time, bool) { return w.stream.Context().Deadline() }
func (w *recvWait) Value(key any) any           { return w.stream.Context().Value(key) }

func (w *recvWait) Done() <-chan struct{} {
	if w.ahead == nil {
		r := &received{in: new(inbound), failed: make(chan struct{}), done: make(chan struct{})}
		w.ahead = r
		go func(recv messageReceiver, stream context.Context) {
			if r.err = recv.RecvMsg(r.in); r.err != nil {
				close(r.failed)
				close(r.done)
				return
			}
			close(r.done)
			// The stream's end is the goroutine's: a reset no receive
			// is waiting for shows only there.
			<-stream.Done()
			close(r.failed)
		}(w.recv, w.stream.Context())
	}
	return w.ahead.failed
}

func (w *recvWait) Err() error {
	if err := w.stream.Context().Err(); err != nil {
		return err
	}
	if w.ahead == nil {
		return nil
	}
	select {
	case <-w.ahead.failed:
		if errors.Is(w.ahead.err, io.EOF) {
			return errGatewayClosed
		}
		return context.Canceled
	default:
		return nil
	}
}

// receive reads the stream's next message into x.in, or takes the one
// received ahead while the request waited.
func (x *exchange) receive(stream messageReceiver) error {
	r := x.wait.ahead
	if r == nil {
		return stream.RecvMsg(x.in)
	}
	x.wait.ahead = nil
	<-r.done
	if r.err != nil {
		return r.err
	}
	x.in = r.in
	return nil
}
