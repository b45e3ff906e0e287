package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// respond runs the upstream (or router) response through the ext_proc stream and
// writes what the picker returns to the client. ctx is the downstream request's
// context.
func (f *flow) respond(ctx context.Context, resp *http.Response, served string) {
	defer resp.Body.Close()
	f.rec.Served = served
	x := f.x
	x.setServed(served)
	h := responseHeaders(resp)
	hasBody := bodyExpected(f.r.Method, resp)
	msg := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: h.proto(), EndOfStream: !hasBody,
		}},
		MetadataContext: x.metadata(served),
	}
	_ = x.send(msg, func() { x.awaitRespHeaders, x.respBodyOpen = true, hasBody })

	var reply *extprocv3.HeadersResponse
	select {
	case reply = <-x.respHeaders:
	case <-x.stopped:
		f.responseStopped(resp, served)
		return
	}
	rejected, err := applyMutation(h, reply.GetResponse().GetHeaderMutation(), !f.g.o.allowCL)
	f.g.c.rejected.Add(int64(rejected))
	if err != nil {
		x.stop(nil, err)
		f.processingError(err)
		return
	}
	f.writeHeaders(h, hasBody)
	if !hasBody {
		return
	}

	// An upstream that dies mid-body stops the exchange at once: the client's
	// stream is reset and the ext_proc stream ends, as Envoy does, rather
	// than both waiting for chunks that will never come.
	pumped := make(chan struct{})
	var trailersSent bool
	go func() {
		defer close(pumped)
		var err error
		trailersSent, err = x.pumpResponse(resp, f.g.o.chunkSize)
		if err != nil && !errors.Is(err, errProcessingStopped) {
			x.stop(nil, &upstreamResetError{err})
		}
	}()
	upstreamDone := func() {
		_ = resp.Body.Close()
		<-pumped
	}
	for i := 0; ; i++ {
		b, err := x.respBody.next(ctx, i)
		if errors.Is(err, io.EOF) {
			upstreamDone()
			if trailersSent {
				f.processedTrailers(resp)
				return
			}
			f.writeTrailers(resp)
			return
		}
		if err != nil {
			upstreamDone()
			f.resetAfterHeaders()
			return
		}
		f.writeBody(b)
	}
}

// processedTrailers waits for the picker's reply to the response trailers
// and passes them on to the client as it mutated them, as Envoy does with
// response_trailer_mode SEND: the trailers reach the client only once the
// reply has come.
func (f *flow) processedTrailers(resp *http.Response) {
	var reply *extprocv3.TrailersResponse
	select {
	case reply = <-f.x.respTrailers:
	case <-f.x.stopped:
		f.resetAfterHeaders()
		return
	}
	h := &headerList{}
	appendHeaders(h, resp.Trailer)
	rejected, err := applyMutation(h, reply.GetHeaderMutation(), false)
	f.g.c.rejected.Add(int64(rejected))
	if err != nil {
		f.x.stop(nil, err)
		f.resetAfterHeaders()
		return
	}
	f.writeTrailerList(h)
}

// responseStopped handles processing that stopped before the response headers reply.
func (f *flow) responseStopped(resp *http.Response, served string) {
	imm, err := f.x.outcome()
	switch {
	case f.clientGone():
	case imm != nil:
		f.writeImmediate(imm)
	case err == nil:
		f.passthrough(resp, served)
	case f.g.o.failureMode == FailOpen && !f.x.bodySeen(true):
		f.rec.ProcessingError = err
		f.rec.FailedOpen = true
		f.g.c.procErrors.Add(1)
		f.g.c.failedOpen.Add(1)
		f.passthrough(resp, served)
	default:
		f.processingError(err)
	}
}

// resetAfterHeaders ends a response whose headers already left: Envoy resets the
// downstream stream, which net/http does when the handler aborts.
func (f *flow) resetAfterHeaders() {
	if f.clientGone() {
		return
	}
	imm, err := f.x.outcome()
	var upstream *upstreamResetError
	switch {
	case errors.As(err, &upstream):
		f.rec.UpstreamReset = true
	case err != nil:
		f.rec.ProcessingError = err
		f.g.c.procErrors.Add(1)
	}
	f.rec.Immediate = imm != nil
	f.rec.Reset = true
	panic(http.ErrAbortHandler)
}

// upstreamResetError is an upstream connection that ended before its
// response did.
type upstreamResetError struct{ err error }

func (e *upstreamResetError) Error() string { return "upstream reset mid-response: " + e.err.Error() }
func (e *upstreamResetError) Unwrap() error { return e.err }

// passthrough forwards a response without processing.
func (f *flow) passthrough(resp *http.Response, served string) {
	defer resp.Body.Close()
	f.rec.Served = served
	f.writeHeaders(responseHeaders(resp), bodyExpected(f.r.Method, resp))
	buf := make([]byte, f.g.o.chunkSize)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			f.writeBody(buf[:n])
		}
		if errors.Is(err, io.EOF) {
			f.writeTrailers(resp)
		}
		if err != nil {
			return
		}
	}
}

// writeImmediate sends an ImmediateResponse as Envoy's sendLocalReply does.
func (f *flow) writeImmediate(imm *extprocv3.ImmediateResponse) {
	f.rec.Immediate = true
	if f.wroteHeader {
		f.resetAfterHeaders()
		return
	}
	status := int(imm.GetStatus().GetCode())
	if status < 200 {
		status = http.StatusOK
	}
	if f.grpc {
		h := grpcLocalReply(status, imm.GetGrpcStatus(), string(imm.GetBody()))
		if _, err := applyMutation(h, imm.GetHeaders(), false); err != nil {
			h = grpcLocalReply(status, imm.GetGrpcStatus(), string(imm.GetBody()))
		}
		f.writeGRPCReply(h)
		return
	}
	h := &headerList{}
	h.add(":status", strconv.Itoa(status))
	if _, err := applyMutation(h, imm.GetHeaders(), false); err != nil {
		h = &headerList{}
		h.add(":status", strconv.Itoa(status))
	}
	f.finalReply(h, imm.GetBody())
}

// localReply is an error answer made by the gateway itself.
func (f *flow) localReply(status int, body string) {
	if f.wroteHeader {
		f.resetAfterHeaders()
		return
	}
	if f.grpc {
		f.writeGRPCReply(grpcLocalReply(status, nil, body))
		return
	}
	h := &headerList{}
	h.add(":status", strconv.Itoa(status))
	f.finalReply(h, []byte(body))
}

func (f *flow) finalReply(h *headerList, body []byte) {
	if len(body) > 0 && h.get("content-type") == "" {
		h.add("content-type", "text/plain")
	}
	h.set("content-length", strconv.Itoa(len(body)))
	hdr := f.w.Header()
	for k, v := range h.httpHeader() {
		hdr[k] = v
	}
	f.status(h)
	f.w.WriteHeader(f.rec.Status)
	f.wroteHeader = true
	if len(body) > 0 {
		f.writeBody(body)
	}
}

// writeHeaders writes processed response headers; content-length is dropped as
// Envoy does in FULL_DUPLEX_STREAMED mode unless allowed. The headers of a
// gRPC response without a body are not flushed, so that they end the stream
// as the trailers-only response they are.
func (f *flow) writeHeaders(h *headerList, hasBody bool) {
	hdr := f.w.Header()
	for k, v := range h.httpHeader() {
		hdr[k] = v
	}
	if !f.g.o.allowCL {
		hdr.Del("Content-Length")
	}
	f.status(h)
	f.w.WriteHeader(f.rec.Status)
	f.wroteHeader = true
	if f.grpc && !hasBody {
		return
	}
	_ = http.NewResponseController(f.w).Flush()
}

func (f *flow) status(h *headerList) {
	f.rec.Status = http.StatusBadGateway
	if code, err := strconv.Atoi(h.get(":status")); err == nil {
		f.rec.Status = code
	}
	if s := h.get("grpc-status"); s != "" {
		f.rec.GRPCStatus = s
	}
}

func (f *flow) writeBody(b []byte) {
	if len(b) == 0 {
		return
	}
	if f.rec.TimeToFirstByte == 0 {
		f.rec.TimeToFirstByte = f.g.o.clock.Since(f.start)
	}
	_, _ = f.w.Write(b)
	_ = http.NewResponseController(f.w).Flush()
}

func bodyExpected(method string, resp *http.Response) bool {
	switch {
	case method == http.MethodHead, resp.ContentLength == 0:
		return false
	case resp.StatusCode == http.StatusNoContent, resp.StatusCode == http.StatusNotModified:
		return false
	}
	return true
}
