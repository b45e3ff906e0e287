package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/uuid"
)

// flow is one downstream request on its way through the gateway.
type flow struct {
	g     *Gateway
	w     http.ResponseWriter
	r     *http.Request
	start time.Time
	rec   Record

	x         *exchange
	cancel    context.CancelFunc
	stopWatch func() bool
	pumpDone  chan pumpResult
	pumped    *pumpResult
	body      *clientBody // the downstream body the pump reads, if any

	host *pickerHost // the picker replica of the stream

	// unprocessed is set when FailOpen lets the request continue without the picker.
	unprocessed bool
	wroteHeader bool
	// grpc is set for a gRPC request: its local replies are trailers-only
	// gRPC responses and its upstream speaks HTTP/2.
	grpc bool
}

type pumpResult struct {
	leftover []byte
	err      error
}

// serve takes the request through the picker and upstream. ctx is the
// downstream request's context; it bounds every upstream attempt.
func (f *flow) serve(ctx context.Context) {
	hint, hinted := f.subsetHint()
	h := requestHeaders(f.r, uuid.NewString())
	hasBody := f.r.Body != nil && f.r.Body != http.NoBody

	// The ext_proc stream lives on the gateway's context, not the request's:
	// after a normal end it outlasts the handler for the close grace period,
	// and the request's end cancels it through stopWatch instead.
	streamCtx, cancel := context.WithCancel(f.g.base)
	f.cancel = cancel
	f.stopWatch = context.AfterFunc(ctx, cancel)
	stream, host, err := f.g.pickers.open(streamCtx) //nolint:contextcheck // the stream outlives the handler for the close grace; the request's end cancels it through stopWatch.
	if err != nil {
		f.requestFailed(ctx, fmt.Errorf("open ext_proc stream: %w", err), h, hasBody)
		return
	}
	f.g.c.streams.Add(1)
	f.rec.ExtProcStreams = 1
	f.host, f.rec.Picker = host, host.addr
	f.x = newExchange(stream, f.g, hint, hinted)
	go f.x.run(streamCtx) //nolint:contextcheck // bound to the stream's own context, which the request's end cancels through stopWatch.
	f.pumpDone = make(chan pumpResult, 1)
	var in io.Reader
	if hasBody {
		f.body = &clientBody{r: f.r.Body, left: f.r.ContentLength}
		in = f.body
	}
	go func() {
		left, err := f.x.pumpRequest(h, in, f.r.ContentLength, f.g.o.chunkSize)
		f.pumpDone <- pumpResult{left, err}
	}()

	var reply *extprocv3.HeadersResponse
	select {
	case reply = <-f.x.reqHeaders:
	case <-f.x.stopped:
		f.requestStopped(ctx, h, hasBody)
		return
	}
	rejected, err := applyMutation(h, reply.GetResponse().GetHeaderMutation(), !f.g.o.allowCL)
	f.g.c.rejected.Add(int64(rejected))
	if err != nil {
		f.x.stop(nil, err)
		f.processingError(err)
		return
	}
	endpoints, err := destination(f.x.lbSnapshot(), h, f.g.o.headerRouting)
	if err != nil && f.g.o.defaultUpstream != "" {
		endpoints = []string{f.g.o.defaultUpstream}
	}
	f.rec.Endpoints, f.rec.Routed = endpoints, f.g.o.clock.Since(f.start)
	var body func() io.ReadCloser
	if hasBody {
		body = func() io.ReadCloser { return f.x.reqBody.reader(ctx) }
	}
	resp, served, err := f.forward(ctx, h, endpoints, body)
	if err != nil {
		if f.stoppedEarly() {
			f.requestStopped(ctx, h, hasBody)
		}
		return
	}
	f.respond(ctx, resp, served)
}

// stoppedEarly reports whether processing stopped with an error, an immediate
// response or a client that went away.
func (f *flow) stoppedEarly() bool {
	select {
	case <-f.x.stopped:
		imm, err := f.x.outcome()
		return imm != nil || err != nil
	default:
		return f.r.Context().Err() != nil
	}
}

// requestStopped handles processing that stopped before the upstream response.
func (f *flow) requestStopped(ctx context.Context, h *headerList, hasBody bool) {
	imm, err := f.x.outcome()
	switch {
	case f.clientGone():
	case imm != nil:
		f.writeImmediate(imm)
	case err != nil:
		f.requestFailed(ctx, err, h, hasBody)
	default:
		f.requestFailed(ctx, ErrStreamClosed, h, hasBody)
	}
}

func (f *flow) clientGone() bool {
	if f.r.Context().Err() == nil {
		return false
	}
	if !f.rec.ClientGone {
		f.rec.ClientGone = true
		f.g.c.gone.Add(1)
	}
	return true
}

// requestFailed applies the failure mode to a failure of the request direction.
func (f *flow) requestFailed(ctx context.Context, err error, h *headerList, hasBody bool) {
	var leftover []byte
	if f.x != nil {
		res := f.waitPump()
		leftover = res.leftover
		if f.x.bodySeen(false) || f.g.o.failureMode != FailOpen {
			f.processingError(err)
			return
		}
	} else if f.g.o.failureMode != FailOpen {
		f.processingError(err)
		return
	}
	f.unprocessed = true
	f.rec.ProcessingError = err
	f.rec.FailedOpen = true
	f.g.c.procErrors.Add(1)
	f.g.c.failedOpen.Add(1)
	var endpoints []string
	if f.g.o.defaultUpstream != "" {
		endpoints = []string{f.g.o.defaultUpstream}
	}
	f.rec.Endpoints = endpoints
	var body func() io.ReadCloser
	if hasBody {
		body = func() io.ReadCloser {
			return io.NopCloser(io.MultiReader(bytes.NewReader(leftover), f.r.Body))
		}
	}
	resp, served, ferr := f.forward(ctx, h, endpoints, body)
	if ferr != nil {
		return
	}
	f.passthrough(resp, served)
}

// processingError answers an ext_proc failure the way Envoy's filter does.
func (f *flow) processingError(err error) {
	f.rec.ProcessingError = err
	f.g.c.procErrors.Add(1)
	status := http.StatusInternalServerError
	if errors.Is(err, ErrMessageTimeout) {
		status = http.StatusGatewayTimeout
	}
	f.localReply(status, "")
}

// waitPump waits for the request pump, cutting a stalled downstream body read short.
func (f *flow) waitPump() pumpResult {
	if f.pumped != nil {
		return *f.pumped
	}
	if f.pumpDone == nil {
		return pumpResult{}
	}
	// A pump that already finished wins over a stop: cutting the read would
	// also make net/http cancel the request's context as if the client went.
	select {
	case res := <-f.pumpDone:
		f.pumped = &res
		return res
	default:
	}
	select {
	case res := <-f.pumpDone:
		f.pumped = &res
	case <-f.x.stopped:
		f.cutRead()
		res := <-f.pumpDone
		f.pumped = &res
	}
	return *f.pumped
}

// cutRead makes the pump's pending read of the downstream body fail, so
// that it returns, unless the body is complete (or there is none). Then
// net/http itself reads ahead on the connection, to notice a client that
// goes away, and a deadline would end that read as a broken connection:
// net/http would cancel the context of this request and of every later one
// on the connection, which the client keeps alive.
func (f *flow) cutRead() {
	if f.body == nil || f.body.complete.Load() {
		return
	}
	_ = http.NewResponseController(f.w).SetReadDeadline(time.Now())
}

// clientBody is the downstream body as the pump reads it; complete is set
// once the last of it has been read.
type clientBody struct {
	r        io.Reader
	left     int64 // declared bytes not yet read; -1 when undeclared
	complete atomic.Bool
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if b.left >= 0 {
		b.left -= int64(n)
	}
	if err != nil || b.left == 0 {
		b.complete.Store(true)
	}
	return n, err
}

func (f *flow) subsetHint() ([]string, bool) {
	if vals, ok := f.r.Header[http.CanonicalHeaderKey(SubsetHintHeader)]; ok {
		f.r.Header.Del(SubsetHintHeader)
		if len(vals) == 0 {
			return []string{}, true
		}
		return splitHint(vals[0]), true
	}
	if f.g.o.subsetHint != nil {
		return f.g.o.subsetHint(f.r)
	}
	return nil, false
}

// finish joins the request's goroutines, closes the ext_proc stream and records.
func (f *flow) finish() {
	if f.pumpDone != nil && f.pumped == nil {
		select {
		case res := <-f.pumpDone:
			f.pumped = &res
		default:
			f.cutRead()
			res := <-f.pumpDone
			f.pumped = &res
		}
	}
	if f.cancel != nil {
		stillHere := f.stopWatch()
		_, err := f.outcomeIfStopped()
		if f.host != nil && err != nil && f.r.Context().Err() == nil {
			f.g.pickers.failed(f.host, err)
		} else if f.host != nil && err == nil {
			f.g.pickers.succeeded(f.host)
		}
		if f.x != nil && stillHere && err == nil {
			f.g.closers.Add(1)
			go f.g.closeStream(f.x, f.cancel)
		} else {
			f.cancel()
		}
	}
	if f.r.Context().Err() != nil && f.rec.Status == 0 {
		f.clientGone()
	}
	if f.x != nil {
		f.rec.DynamicMetadata = f.x.lbSnapshot().AsMap()
	}
	f.rec.Duration = f.g.o.clock.Since(f.start)
	if f.g.o.onRecord != nil {
		f.g.o.onRecord(f.rec)
	}
}

func (f *flow) outcomeIfStopped() (*extprocv3.ImmediateResponse, error) {
	if f.x == nil {
		return nil, nil
	}
	select {
	case <-f.x.stopped:
		return f.x.outcome()
	default:
		return nil, nil
	}
}
