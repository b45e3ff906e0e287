package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Envoy's local reply texts for upstream failures.
const (
	noHealthyUpstream = "no healthy upstream"
	connectFailure    = "upstream connect error or disconnect/reset before headers. reset reason: connection failure"
	resetBeforeHeader = "upstream connect error or disconnect/reset before headers. reset reason: connection termination"
)

// forward is Envoy's router: it sends the request to the endpoints in order, one
// attempt each, retrying as the retry policy allows. It returns the response to
// pass back (an upstream one, or the router's local reply), the endpoint that
// served it, or an error when the request cannot continue (client gone, body
// lost because processing stopped).
func (f *flow) forward(ctx context.Context, h *headerList, endpoints []string, body func() io.ReadCloser) (*http.Response, string, error) {
	if len(endpoints) == 0 {
		return f.routerReply(http.StatusServiceUnavailable, noHealthyUpstream), "", nil
	}
	policy := f.g.o.retry
	limit := min(policy.MaxAttempts, len(endpoints))
	if f.unprocessed && body != nil {
		limit = 1 // a body read straight from the client cannot be replayed
	}
	reason := connectFailure
	for i := 0; i < limit; i++ {
		ep := endpoints[i]
		if i > 0 {
			f.g.c.retries.Add(1)
		}
		f.g.c.attempts.Add(1)
		req, err := f.upstreamRequest(ctx, h, ep, body)
		if err != nil {
			return nil, "", err
		}
		resp, err := f.g.upstream(f.grpc).RoundTrip(req)
		if err != nil {
			if ctx.Err() != nil || (!f.unprocessed && f.stoppedEarly()) {
				return nil, "", err
			}
			connect := isConnectFailure(err)
			if connect {
				f.g.c.connectFailures.Add(1)
				reason = connectFailure
			} else {
				reason = resetBeforeHeader
			}
			f.rec.Attempts = append(f.rec.Attempts, Attempt{Endpoint: ep, Err: err.Error()})
			if policy.On5xx || (connect && policy.OnConnectFailure) {
				continue
			}
			break
		}
		f.rec.Attempts = append(f.rec.Attempts, Attempt{Endpoint: ep, Status: resp.StatusCode})
		if resp.StatusCode >= 500 && policy.On5xx && i+1 < limit {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
			continue
		}
		return resp, ep, nil
	}
	return f.routerReply(http.StatusServiceUnavailable, reason), "", nil
}

func (f *flow) upstreamRequest(ctx context.Context, h *headerList, ep string, body func() io.ReadCloser) (*http.Request, error) {
	var rc io.ReadCloser = http.NoBody
	if body != nil {
		rc = body()
	}
	req, err := http.NewRequestWithContext(ctx, h.get(":method"), "http://"+ep+h.get(":path"), rc)
	if err != nil {
		return nil, err
	}
	req.Host = h.get(":authority")
	req.Header = h.httpHeader()
	req.Header.Del("Host")
	req.ContentLength = 0
	if body != nil {
		req.ContentLength = -1
		if !f.unprocessed {
			req.GetBody = func() (io.ReadCloser, error) { return body(), nil }
		}
	}
	if cl := req.Header.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && f.g.o.allowCL {
			req.ContentLength = n
		}
	}
	req.Header.Del("Content-Length")
	if f.grpc {
		req.Header.Set("Te", "trailers") // the one te Envoy forwards, which gRPC servers expect
	}
	return req, nil
}

func isConnectFailure(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// routerReply is a local reply of Envoy's router; like an upstream response it
// still goes through the ext_proc response path.
func (f *flow) routerReply(status int, text string) *http.Response {
	if f.grpc {
		h := grpcLocalReply(status, nil, text)
		return &http.Response{StatusCode: http.StatusOK, Header: h.httpHeader(), ContentLength: 0, Body: http.NoBody}
	}
	return &http.Response{
		StatusCode:    status,
		Header:        http.Header{"Content-Type": {"text/plain"}, "Content-Length": {strconv.Itoa(len(text))}},
		ContentLength: int64(len(text)),
		Body:          io.NopCloser(strings.NewReader(text)),
	}
}
