package gateway

import (
	"errors"
	"fmt"
	"io"

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
	return x.pumpBody(body, contentLength, chunk, false)
}

// pumpResponse streams the upstream body as response_body chunks.
func (x *exchange) pumpResponse(body io.Reader, contentLength int64, chunk int) error {
	_, err := x.pumpBody(body, contentLength, chunk, true)
	return err
}

func (x *exchange) pumpBody(body io.Reader, contentLength int64, chunk int, response bool) ([]byte, error) {
	buf := make([]byte, chunk)
	var total int64
	for {
		n, rerr := body.Read(buf)
		total += int64(n)
		end := errors.Is(rerr, io.EOF) || (contentLength >= 0 && total >= contentLength)
		if n > 0 || end {
			data := append([]byte(nil), buf[:n]...)
			if err := x.send(bodyMessage(data, end, response, x), func() { x.sawBody(response) }); err != nil {
				return data, err
			}
			if end {
				return nil, nil
			}
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
