package extproc

import (
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// directStream is one ext_proc stream of a directConn: the exchange it
// feeds, its flow-control state and, as the exchange's context, whether
// the client has gone. It is the exchange's replySink.
type directStream struct {
	c  *directConn
	id uint32
	x  *exchange

	partial []byte // a message spanning frames, being gathered (reader only)
	// credited is how many bytes at the head of partial were already given
	// back to the stream's window: those of a message larger than the
	// window, which could never arrive whole otherwise (reader only).
	credited int

	remoteClosed atomic.Bool // the client ended its side
	finished     atomic.Bool // the exchange has ended

	// Stream goroutine mode (not c.inline): events wait here for the
	// stream's goroutine; done closes when the stream has finished.
	qmu     sync.Mutex
	queue   []streamEvent
	queued  int // bytes of the queued messages, bounded in gather
	running bool
	done    chan struct{}

	// The exchange's context, and the one its request waits in the
	// flow-control queue with (waitContext), which the client's close
	// ends too.
	cmu       sync.Mutex
	cancelled atomic.Bool
	doneCh    chan struct{}
	waitCh    chan struct{}

	// Under c.mu.
	recvUnacked int   // message bytes handled since the last window update
	recvWindow  int64 // what the client may still send on this stream
	sendWindow  int64 // what the client lets this stream send
	headersSent bool
	pending     []byte         // framed replies waiting for window
	trailer     *status.Status // the status to send once pending is out
	blocked     bool           // in c.blocked
}

// streamEvent is what happens to a stream: a message (msg, isMsg, and the
// bytes its handling gives back to the stream's window), or its end with
// err (eof: the client closed its side; reset: the stream is gone and
// takes no trailers).
type streamEvent struct {
	msg    []byte
	isMsg  bool
	credit int
	err    error
	eof    bool
	reset  bool
}

// event hands ev to the stream's exchange: at once on the reader goroutine
// (c.inline), else through the stream's queue and goroutine.
func (st *directStream) event(ev streamEvent) {
	if ev.eof {
		st.remoteClosed.Store(true)
		st.closeWait()
	}
	if ev.reset {
		st.cancel()
	}
	if st.finished.Load() {
		if ev.reset {
			st.dropHeldBack()
		}
		return
	}
	if st.c.inline {
		st.run(ev)
		return
	}
	if ev.isMsg {
		ev.msg = append([]byte(nil), ev.msg...)
	}
	st.qmu.Lock()
	if st.done == nil {
		st.done = make(chan struct{})
	}
	st.queue = append(st.queue, ev)
	st.queued += len(ev.msg)
	start := !st.running
	st.running = true
	st.qmu.Unlock()
	if start {
		go st.drain()
	}
}

// drain handles the stream's queued events in order, then flushes.
func (st *directStream) drain() {
	for {
		st.qmu.Lock()
		if len(st.queue) == 0 {
			st.running = false
			st.qmu.Unlock()
			st.c.mu.Lock()
			st.c.flushLocked()
			st.c.mu.Unlock()
			return
		}
		ev := st.queue[0]
		st.queue[0] = streamEvent{}
		st.queue = st.queue[1:]
		st.queued -= len(ev.msg)
		st.qmu.Unlock()
		if !st.finished.Load() {
			st.run(ev)
		}
	}
}

// wait returns once the stream has finished.
func (st *directStream) wait() {
	st.qmu.Lock()
	done := st.done
	st.qmu.Unlock()
	if done != nil {
		<-done
	}
}

// run handles one event on the goroutine that owns the exchange.
func (st *directStream) run(ev streamEvent) {
	var end bool
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				end, err = true, st.x.recovered(p)
			}
		}()
		if ev.isMsg {
			end, err = st.deliver(ev.msg)
			return
		}
		end, err = true, st.x.ended(ev.err)
	}()
	if ev.credit > 0 {
		st.consumed(ev.credit)
	}
	if end {
		st.finish(err, ev.reset)
	}
}

// deliver decodes b into the exchange's message and steps the exchange.
func (st *directStream) deliver(b []byte) (bool, error) {
	in := st.x.in
	if !in.decode(b) {
		if err := proto.Unmarshal(b, &in.ProcessingRequest); err != nil {
			return true, st.x.ended(status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err))
		}
	}
	return st.x.step()
}

// gather reads a DATA frame's payload: complete messages are handed over
// as they are found, a message that continues in the next frame waits in
// st.partial. An error is the stream's end status.
func (st *directStream) gather(p []byte) error {
	for len(p) > 0 {
		if len(st.partial) == 0 && len(p) >= 5 {
			n, err := st.c.messageLength(p)
			if err != nil {
				return err
			}
			if len(p)-5 >= n {
				st.event(streamEvent{msg: p[5 : 5+n], isMsg: true, credit: 5 + n})
				p = p[5+n:]
				continue
			}
		}
		if st.partial == nil {
			st.partial = (*partialBuffers.Get().(*[]byte))[:0]
		}
		st.partial = append(st.partial, p...)
		p = nil
		for len(st.partial) >= 5 {
			n, err := st.c.messageLength(st.partial)
			if err != nil {
				return err
			}
			if len(st.partial)-5 < n {
				break
			}
			credit := 5 + n - st.credited
			st.credited = 0
			st.event(streamEvent{msg: st.partial[5 : 5+n], isMsg: true, credit: credit})
			rest := copy(st.partial, st.partial[5+n:])
			st.partial = st.partial[:rest]
		}
	}
	if len(st.partial) >= 5 {
		// A message too large for the window is credited as it arrives:
		// the client could not send its end otherwise. Its size is bounded
		// by MaxRecvMsgSize.
		if n, _ := st.c.messageLength(st.partial); 5+n > streamWindow && len(st.partial) > st.credited {
			st.consumed(len(st.partial) - st.credited)
			st.credited = len(st.partial)
		}
	}
	if !st.c.inline {
		// Only a gateway that ignores the waiting request queues more than
		// a window of messages and one message credited as it arrived.
		st.qmu.Lock()
		over := st.queued > streamWindow+st.c.d.opts.MaxRecvMsgSize
		st.qmu.Unlock()
		if over {
			return errQueueFull
		}
	}
	return nil
}

// errQueueFull ends a stream whose gateway sent more than a waiting stream
// may queue; the stream is reset at once, its request cancelled.
var errQueueFull = status.Error(codes.ResourceExhausted, "the client sent past what a waiting stream may queue")

// partialBuffers keep the buffers in which messages spanning frames were
// gathered, for the streams after, up to maxPooledPartial bytes each.
var partialBuffers = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledPartial = 1 << 20

// releasePartial gives a finished stream's gathering buffer back; on the
// reader goroutine only.
func (st *directStream) releasePartial() {
	if st.partial != nil && cap(st.partial) <= maxPooledPartial {
		b := st.partial[:0]
		partialBuffers.Put(&b)
	}
	st.partial = nil
}

// messageLength reads a gRPC message prefix.
func (c *directConn) messageLength(p []byte) (int, error) {
	switch p[0] {
	case 0:
	case 1:
		return 0, status.Error(codes.Internal, "grpc: compressed flag set with identity or empty encoding")
	default:
		return 0, status.Errorf(codes.Internal, "grpc: received unexpected payload format %d", p[0])
	}
	n := binary.BigEndian.Uint32(p[1:5])
	if uint64(n) > uint64(c.d.opts.MaxRecvMsgSize) {
		return 0, status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, c.d.opts.MaxRecvMsgSize)
	}
	return int(n), nil
}

// consumed returns n handled bytes to the stream's receive window.
func (st *directStream) consumed(n int) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st.recvUnacked += n
	if st.recvUnacked >= streamWindow/4 && !st.remoteClosed.Load() && !st.finished.Load() {
		_ = c.fr.WriteWindowUpdate(st.id, uint32(st.recvUnacked))
		st.recvWindow += int64(st.recvUnacked)
		st.recvUnacked = 0
	}
}

// Send writes r to the stream, or holds it until the client's windows
// allow it.
func (st *directStream) Send(r *extprocv3.ProcessingResponse) error {
	if st.cancelled.Load() {
		return status.Error(codes.Canceled, "the stream was cancelled")
	}
	buf, err := marshalReply(r, 5)
	if err != nil {
		return status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	defer replyBuffers.Put(buf)
	grpcPrefix(*buf, len(*buf)-5)
	c := st.c
	if len(*buf)-5 > c.d.opts.MaxSendMsgSize {
		return status.Errorf(codes.ResourceExhausted, "grpc: trying to send message larger than max (%d vs. %d)", len(*buf)-5, c.d.opts.MaxSendMsgSize)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.werr != nil || c.closed {
		return status.Error(codes.Unavailable, "the ext_proc connection closed")
	}
	if !st.headersSent {
		st.headersSent = true
		if err := c.writeHeaderBlock(st.id, false, fieldStatusOK, fieldGRPCType); err != nil {
			return status.Error(codes.Unavailable, err.Error())
		}
	}
	st.writeData(*buf)
	return nil
}

// writeData writes b as DATA frames as far as the windows allow and keeps
// the rest; c.mu held.
func (st *directStream) writeData(b []byte) {
	if len(st.pending) == 0 {
		b = st.sendSome(b)
	}
	if len(b) > 0 {
		st.pending = append(st.pending, b...)
		st.block()
	}
}

// sendSome writes as much of b as the windows and frame size allow and
// returns the rest; c.mu held.
func (st *directStream) sendSome(b []byte) []byte {
	c := st.c
	for len(b) > 0 {
		n := min(int64(len(b)), int64(c.maxFrame), st.sendWindow, c.sendWindow)
		if n <= 0 {
			break
		}
		if err := c.fr.WriteData(st.id, false, b[:n]); err != nil {
			return nil // the connection is closing
		}
		st.sendWindow -= n
		c.sendWindow -= n
		b = b[n:]
		c.sentReply = true
	}
	return b
}

func (st *directStream) block() {
	if !st.blocked {
		st.blocked = true
		st.c.blocked = append(st.c.blocked, st)
	}
}

// sendPending sends what the stream held back, then its trailers once
// nothing is left; c.mu held.
func (st *directStream) sendPending() {
	rest := st.sendSome(st.pending)
	st.pending = append(st.pending[:0], rest...)
	if len(st.pending) == 0 {
		st.blocked = false
		if st.trailer != nil {
			st.writeTrailers(st.trailer)
		}
	}
}

// finish ends the exchange with err (nil: OK), sending the status unless
// the stream was reset, and forgets the stream. A stream whose context was
// cancelled is being reset (by the client, or here with a code of the
// reader's choosing): an exchange that ends on that cancellation before the
// reset event reaches it sends no status either, which would otherwise
// close the stream ahead of the reset with NO_ERROR.
func (st *directStream) finish(err error, reset bool) {
	st.finished.Store(true)
	c := st.c
	c.mu.Lock()
	switch {
	case reset || st.cancelled.Load() || c.closed:
		st.pending, st.trailer = nil, nil
		delete(c.streams, st.id)
	case len(st.pending) > 0:
		st.trailer = statusOf(err) // sent after the held-back replies
	default:
		st.writeTrailers(statusOf(err))
	}
	c.closeIfDrained()
	if !c.inline {
		c.flushLocked()
	}
	c.mu.Unlock()
	c.d.s.close(st.x)
	st.x = nil
	st.qmu.Lock()
	if st.done != nil {
		close(st.done)
	}
	st.qmu.Unlock()
}

// statusOK is every cleanly ended stream's status, made once.
var statusOK = status.New(codes.OK, "")

func statusOf(err error) *status.Status {
	if err == nil {
		return statusOK
	}
	return status.Convert(err)
}

// writeTrailers ends the stream with s (see writeStatus) and forgets it;
// c.mu held.
func (st *directStream) writeTrailers(s *status.Status) {
	c := st.c
	st.trailer = nil
	_ = c.writeStatus(st.id, s, st.headersSent, !st.remoteClosed.Load())
	delete(c.streams, st.id)
	c.closeIfDrained()
}

// dropHeldBack forgets a finished stream that was reset while its last
// replies and status waited for window: the client takes it for closed and
// will send no window for it, and it must not keep a place among the
// connection's streams (its concurrency cap, a graceful stop's drain).
func (st *directStream) dropHeldBack() {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(st.pending) == 0 && st.trailer == nil {
		return // finish forgets it, or already has
	}
	st.pending, st.trailer = nil, nil
	delete(c.streams, st.id)
	if st.blocked {
		st.blocked = false
		c.blocked = slices.DeleteFunc(c.blocked, func(b *directStream) bool { return b == st })
	}
	c.closeIfDrained()
}

// cancel ends the exchange's context and the wait context. It sets
// cancelled under cmu, as Done reads it: a Done between the two would make
// the channel, find it cancelled and close it, and cancel would close it
// again.
func (st *directStream) cancel() {
	st.cmu.Lock()
	if !st.cancelled.Swap(true) && st.doneCh != nil {
		close(st.doneCh)
	}
	st.cmu.Unlock()
	st.closeWait()
}

// closeWait ends the wait context, once: at the client's close or reset.
func (st *directStream) closeWait() {
	st.cmu.Lock()
	defer st.cmu.Unlock()
	if st.waitCh != nil {
		select {
		case <-st.waitCh:
		default:
			close(st.waitCh)
		}
	}
}

// Context is the stream itself: it ends when the client resets the stream
// or the connection closes.
func (st *directStream) Context() context.Context { return (*streamContext)(st) }

// streamContext is a directStream as a context.Context, so that a stream
// costs no context of its own.
type streamContext directStream

func (*streamContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*streamContext) Value(any) any               { return nil }

func (sc *streamContext) Done() <-chan struct{} {
	st := (*directStream)(sc)
	st.cmu.Lock()
	defer st.cmu.Unlock()
	if st.doneCh == nil {
		st.doneCh = make(chan struct{})
		if st.cancelled.Load() {
			close(st.doneCh)
		}
	}
	return st.doneCh
}

func (sc *streamContext) Err() error {
	if (*directStream)(sc).cancelled.Load() {
		return context.Canceled
	}
	return nil
}

// waitContext is the stream's context, ended also by the client's close
// (with errGatewayClosed), for its request to wait in the flow-control
// queue with (closeWatcher).
func (st *directStream) waitContext() context.Context { return (*waitContext)(st) }

type waitContext directStream

func (*waitContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*waitContext) Value(any) any               { return nil }

func (wc *waitContext) Done() <-chan struct{} {
	st := (*directStream)(wc)
	st.cmu.Lock()
	defer st.cmu.Unlock()
	if st.waitCh == nil {
		st.waitCh = make(chan struct{})
		if st.cancelled.Load() || st.remoteClosed.Load() {
			close(st.waitCh)
		}
	}
	return st.waitCh
}

func (wc *waitContext) Err() error {
	st := (*directStream)(wc)
	switch {
	case st.cancelled.Load():
		return context.Canceled
	case st.remoteClosed.Load():
		return errGatewayClosed
	}
	return nil
}
