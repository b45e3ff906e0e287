package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/utils/clock"
)

var (
	// ErrMessageTimeout is an ext_proc reply that did not come in time.
	ErrMessageTimeout = errors.New("ext_proc message timeout")
	// ErrSpuriousMessage is an ext_proc reply that does not fit the exchange.
	ErrSpuriousMessage = errors.New("spurious ext_proc message")
	// ErrStreamClosed is an ext_proc stream the picker ended while a reply was due.
	ErrStreamClosed = errors.New("ext_proc stream closed while a reply was due")

	errProcessingStopped = errors.New("ext_proc processing stopped")
)

// exchange is the ext_proc side of one downstream request: the stream, what the
// gateway still waits for, and what the picker has answered.
type exchange struct {
	stream  extprocv3.ExternalProcessor_ProcessClient
	clock   clock.WithTicker
	timeout time.Duration
	c       *counters
	hint    []string
	hinted  bool

	sendMu       sync.Mutex
	protocolSent bool
	poke         chan struct{}

	mu               sync.Mutex
	awaitReqHeaders  bool
	reqBodyOpen      bool
	awaitRespHeaders bool
	respBodyOpen     bool
	// awaitRespTrailers: the response trailers went to the picker and its
	// reply, which ends the response body, is due.
	awaitRespTrailers bool
	reqBodySeen       bool
	respBodySeen      bool
	lb                *structpb.Struct
	served            string
	complete          bool
	imm               *extprocv3.ImmediateResponse
	err               error

	reqHeaders   chan *extprocv3.HeadersResponse
	respHeaders  chan *extprocv3.HeadersResponse
	respTrailers chan *extprocv3.TrailersResponse
	reqBody      *chunkQueue
	respBody     *chunkQueue
	stopped      chan struct{}
	done         chan struct{}
}

func newExchange(stream extprocv3.ExternalProcessor_ProcessClient, g *Gateway, hint []string, hinted bool) *exchange {
	return &exchange{
		stream: stream, clock: g.o.clock, timeout: g.o.messageTimeout, c: &g.c,
		hint: hint, hinted: hinted,
		poke:         make(chan struct{}, 1),
		lb:           &structpb.Struct{Fields: map[string]*structpb.Value{}},
		reqHeaders:   make(chan *extprocv3.HeadersResponse, 1),
		respHeaders:  make(chan *extprocv3.HeadersResponse, 1),
		respTrailers: make(chan *extprocv3.TrailersResponse, 1),
		reqBody:      newChunkQueue(),
		respBody:     newChunkQueue(),
		stopped:      make(chan struct{}),
		done:         make(chan struct{}),
	}
}

// stop ends processing: with an immediate response, with an error, or with
// neither when the picker closed the stream with nothing due.
func (x *exchange) stop(imm *extprocv3.ImmediateResponse, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.stopLocked(imm, err)
}

func (x *exchange) stopLocked(imm *extprocv3.ImmediateResponse, err error) {
	if x.complete {
		return
	}
	x.complete, x.imm, x.err = true, imm, err
	qerr := err
	if qerr == nil {
		qerr = errProcessingStopped
	}
	x.reqBody.fail(qerr)
	x.respBody.fail(qerr)
	close(x.stopped)
}

// outcome reports how processing stopped; call it after stopped is closed.
func (x *exchange) outcome() (*extprocv3.ImmediateResponse, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.imm, x.err
}

func (x *exchange) awaiting() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return !x.complete && (x.awaitReqHeaders || x.reqBodyOpen || x.awaitRespHeaders || x.respBodyOpen || x.awaitRespTrailers)
}

func (x *exchange) bodySeen(response bool) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if response {
		return x.respBodySeen
	}
	return x.reqBodySeen
}

// metadata is the metadata_context of the next message.
func (x *exchange) metadata(served string) *corev3.Metadata {
	x.mu.Lock()
	defer x.mu.Unlock()
	lb := x.lb
	if served != "" {
		lb = withServed(lb, served)
	}
	return requestMetadata(x.hint, x.hinted, lb)
}

func (x *exchange) setServed(ep string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.served = ep
}

func (x *exchange) servedEndpoint() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.served
}

// closeSend half-closes the stream once no message is being sent.
func (x *exchange) closeSend() error {
	x.sendMu.Lock()
	defer x.sendMu.Unlock()
	if err := x.stream.CloseSend(); err != nil {
		return fmt.Errorf("ext_proc close send: %w", err)
	}
	return nil
}

func (x *exchange) lbSnapshot() *structpb.Struct {
	x.mu.Lock()
	defer x.mu.Unlock()
	return withServed(x.lb, "")
}

// send sends one message; expect records, before the message leaves, what reply
// it makes due.
func (x *exchange) send(req *extprocv3.ProcessingRequest, expect func()) error {
	x.sendMu.Lock()
	defer x.sendMu.Unlock()
	x.mu.Lock()
	if x.complete {
		x.mu.Unlock()
		return errProcessingStopped
	}
	expect()
	x.mu.Unlock()
	if !x.protocolSent {
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		}
		x.protocolSent = true
	}
	err := x.stream.Send(req)
	select {
	case x.poke <- struct{}{}:
	default:
	}
	if err != nil {
		return fmt.Errorf("ext_proc send: %w", err)
	}
	return nil
}

type received struct {
	msg *extprocv3.ProcessingResponse
	err error
}

// run reads the stream until it ends, routes each reply and runs the message timer.
func (x *exchange) run(ctx context.Context) {
	defer close(x.done)
	msgs := make(chan received)
	go func() {
		for {
			m, err := x.stream.Recv()
			select {
			case msgs <- received{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var timer clock.Timer
	var fire <-chan time.Time
	rearm := func() {
		if timer != nil {
			timer.Stop()
			timer, fire = nil, nil
		}
		if x.timeout > 0 && x.awaiting() {
			timer = x.clock.NewTimer(x.timeout)
			fire = timer.C()
		}
	}
	for {
		select {
		case <-ctx.Done():
			x.stop(nil, context.Cause(ctx))
			if timer != nil {
				timer.Stop()
			}
			return
		case <-x.poke:
			rearm()
		case <-fire:
			timer, fire = nil, nil
			if x.awaiting() {
				x.c.timeouts.Add(1)
				x.stop(nil, ErrMessageTimeout)
			}
		case r := <-msgs:
			if r.err != nil {
				x.streamEnded(r.err)
				if timer != nil {
					timer.Stop()
				}
				return
			}
			if err := x.handle(r.msg); err != nil {
				x.stop(nil, err)
			}
			rearm()
		}
	}
}

func (x *exchange) streamEnded(err error) {
	switch {
	case errors.Is(err, io.EOF) && !x.awaiting():
		x.stop(nil, nil)
	case errors.Is(err, io.EOF):
		x.stop(nil, ErrStreamClosed)
	default:
		x.stop(nil, fmt.Errorf("ext_proc stream: %w", err))
	}
}

func spurious(what string) error { return fmt.Errorf("%w: %s", ErrSpuriousMessage, what) }

// handle routes one reply, following Envoy's ordering rules: headers reply first,
// then streamed body replies up to end_of_stream.
func (x *exchange) handle(m *extprocv3.ProcessingResponse) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.complete || m.GetOverrideMessageTimeout() != nil {
		return nil
	}
	if lb, ok := m.GetDynamicMetadata().GetFields()[NamespaceLB]; ok {
		for k, v := range lb.GetStructValue().GetFields() {
			x.lb.Fields[k] = v
		}
	}
	switch r := m.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return x.headersReply(r.RequestHeaders, &x.awaitReqHeaders, x.reqHeaders, "request_headers")
	case *extprocv3.ProcessingResponse_RequestBody:
		return x.bodyReply(r.RequestBody, x.awaitReqHeaders, &x.reqBodyOpen, x.reqBody, "request_body")
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return x.headersReply(r.ResponseHeaders, &x.awaitRespHeaders, x.respHeaders, "response_headers")
	case *extprocv3.ProcessingResponse_ResponseBody:
		return x.bodyReply(r.ResponseBody, x.awaitRespHeaders, &x.respBodyOpen, x.respBody, "response_body")
	case *extprocv3.ProcessingResponse_ResponseTrailers:
		return x.trailersReply(r.ResponseTrailers)
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		x.c.immediate.Add(1)
		x.stopLocked(r.ImmediateResponse, nil)
	default:
		x.c.spurious.Add(1)
		return spurious(fmt.Sprintf("%T", r))
	}
	return nil
}

// headersReply hands h to the phase awaiting it: a reply nobody awaits is
// spurious.
func (x *exchange) headersReply(h *extprocv3.HeadersResponse, awaited *bool, to chan<- *extprocv3.HeadersResponse, what string) error {
	if !*awaited {
		x.c.spurious.Add(1)
		return spurious(what)
	}
	*awaited = false
	to <- h
	return nil
}

// bodyReply queues the streamed body chunk of b for the body that is open;
// a chunk for a body not open, or before its headers, is spurious.
func (x *exchange) bodyReply(b *extprocv3.BodyResponse, headersDue bool, open *bool, q *chunkQueue, what string) error {
	sr := b.GetResponse().GetBodyMutation().GetStreamedResponse()
	if headersDue || !*open || sr == nil {
		x.c.spurious.Add(1)
		return spurious(what)
	}
	if err := q.append(sr.GetBody(), sr.GetEndOfStream()); err != nil {
		x.c.spurious.Add(1)
		return spurious(what)
	}
	if sr.GetEndOfStream() {
		*open = false
	}
	return nil
}

// trailersReply hands the reply to the response trailers over and ends the
// response body: the picker answers the trailers after its last body chunk,
// which, the body having ended with the trailers, carries no end_of_stream.
func (x *exchange) trailersReply(t *extprocv3.TrailersResponse) error {
	if !x.awaitRespTrailers {
		x.c.spurious.Add(1)
		return spurious("response_trailers")
	}
	x.awaitRespTrailers, x.respBodyOpen = false, false
	_ = x.respBody.append(nil, true) // a body that already ended stays as it is
	x.respTrailers <- t
	return nil
}
