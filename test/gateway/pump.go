package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// pumpRequest sends request_headers and then, without waiting for the reply, the
// downstream body as request_body chunks. It returns data read from the client but
// not sent (when processing stopped in between), so a fail-open request can still
// forward it.
func (x *exchange) pumpRequest(h *headerList, body io.Reader, contentLength int64, chunk int) ([]byte, error) {
	noBody := body == nil
	msg := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: h.proto(), EndOfStream: noBody,
		}},
		MetadataContext: x.metadata(""),
	}
	if err := x.send(msg, func() { x.awaitReqHeaders, x.reqBodyOpen = true, !noBody }); err != nil || noBody {
		return nil, err
	}
	return x.pumpBody(body, contentLength, chunk, false, nil)
}

// pumpResponse streams the upstream body as response_body chunks and then
// its trailers, when it has any, as response_trailers: with a
// FULL_DUPLEX_STREAMED body the trailer mode is SEND, and the trailers, not
// an end_of_stream chunk, tell the picker the body is complete. It reports
// whether the trailers went to the picker, whose reply is then due.
func (x *exchange) pumpResponse(resp *http.Response, chunk int) (trailersSent bool, err error) {
	trailers := func() *headerList {
		h := &headerList{}
		appendHeaders(h, resp.Trailer)
		if len(h.entries) == 0 {
			return nil
		}
		return h
	}
	_, err = x.pumpBody(resp.Body, resp.ContentLength, chunk, true, trailers)
	if err != nil {
		return false, err
	}
	t := trailers()
	if t == nil || resp.ContentLength >= 0 {
		return false, nil
	}
	msg := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{
			Trailers: t.proto(),
		}},
		MetadataContext: x.metadata(x.servedEndpoint()),
	}
	if err := x.send(msg, func() { x.awaitRespTrailers = true }); err != nil {
		return false, err
	}
	return true, nil
}

// pumpBody sends body as body chunks, end_of_stream on the last one, unless
// trailers (checked once the body is read to its end) follow it.
func (x *exchange) pumpBody(body io.Reader, contentLength int64, chunk int, response bool, trailers func() *headerList) ([]byte, error) {
	buf := make([]byte, chunk)
	var total int64
	for {
		n, rerr := body.Read(buf)
		total += int64(n)
		eof := errors.Is(rerr, io.EOF)
		end := eof || (contentLength >= 0 && total >= contentLength)
		// Trailers are known once the body has been read to its end; a
		// body of declared length ends with its last byte, before them.
		trailed := eof && contentLength < 0 && trailers != nil && trailers() != nil
		last := end && !trailed
		if n > 0 || last {
			data := append([]byte(nil), buf[:n]...)
			if err := x.send(bodyMessage(data, last, response, x), func() { x.sawBody(response) }); err != nil {
				return data, err
			}
		}
		if end {
			return nil, nil
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, fmt.Errorf("read body: %w", rerr)
		}
	}
}

// sawBody records that body data passed the filter; the caller holds x.mu.
func (x *exchange) sawBody(response bool) {
	if response {
		x.respBodySeen = true
	} else {
		x.reqBodySeen = true
	}
}

func bodyMessage(data []byte, end, response bool, x *exchange) *extprocv3.ProcessingRequest {
	b := &extprocv3.HttpBody{Body: data, EndOfStream: end}
	msg := &extprocv3.ProcessingRequest{}
	if response {
		msg.Request = &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: b}
		msg.MetadataContext = x.metadata(x.servedEndpoint())
	} else {
		msg.Request = &extprocv3.ProcessingRequest_RequestBody{RequestBody: b}
		msg.MetadataContext = x.metadata("")
	}
	return msg
}
