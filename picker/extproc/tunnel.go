package extproc

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// A tunnel is a request whose body is not a request body: an HTTP Upgrade
// (a WebSocket, such as vLLM's /v1/realtime) or a CONNECT. Envoy sends its
// headers without end of stream, then, in FULL_DUPLEX_STREAMED, each chunk of
// the bytes that follow as a body chunk, both ways. The client sends none of
// them before the upstream's answer, which waits for the picker's answer to
// the headers, and they may never end: waiting for the body would hold the
// request until the gateway's timeout. So a tunnel is routed on its headers,
// by load, with no prompt, to the pods that serve the model its query names
// (tunnelModel), and its guard is held until the tunnel closes.

// due reports whether m is accepted outside the states that accept it:
// request trailers still due after routing on the headers, and a tunnel's
// bytes from the client, which come before and after the response headers
// until the client ends its side.
func (x *exchange) due(m message) bool {
	switch m {
	case msgRequestTrailers:
		return x.trailersDue
	case msgRequestBody: // a tunnel's, or the rest of an upload routed on its front
		return (x.tunnel || x.uploading) && !x.clientDone && x.state != awaitingRequest && x.state != readingRequest
	default:
		return false
	}
}

// tunnelBytes passes a chunk of a routed tunnel through as it came, the
// client's (request) or the upstream's after its 101. The client's end of
// stream ends its side; the upstream's closes the tunnel: the session
// completed.
func (x *exchange) tunnelBytes(b *extprocv3.HttpBody, request bool) error {
	if request {
		x.clientDone = b.GetEndOfStream()
	} else {
		x.respBytes += len(b.GetBody())
		if b.GetEndOfStream() {
			x.state = finished
			x.completed()
		}
	}
	return x.send(x.out.streamedBody(b.GetBody(), b.GetEndOfStream(), request))
}

// upgradesToTunnel reports whether an upgrade header's value, a list of
// protocols, names one other than h2c. An upgrade to h2c (HTTP/2 over
// cleartext, RFC 7540 section 3.2, which curl asks for with --http2 on a
// plain http request) serves the same request over HTTP/2 if the server
// agrees and over HTTP/1.1 if not: its body is its own and ends, and it is
// read and routed as any request's.
func upgradesToTunnel(v string) bool {
	for p := range strings.SplitSeq(v, ",") {
		if p = strings.TrimSpace(p); p != "" && !strings.EqualFold(p, "h2c") {
			return true
		}
	}
	return false
}

// served reports whether the upstream's status says it served the request:
// 2xx (for gRPC, with no grpc-status other than OK in the headers of a
// trailers-only response), or, for a tunnel, 101 Switching Protocols.
func (x *exchange) served() bool {
	return x.status >= 200 && x.status <= 299 && !x.grpcFailed || x.tunnel && x.status == 101
}

// maxQueryModel is the longest model name a tunnel's query may give, once
// decoded.
const maxQueryModel = 1024

// tunnelModel reads the model a tunnel's query names (a realtime API's
// /v1/realtime?model=...), the only place it names one, and decides the
// model the tunnel is sent to, as rewriteModel does for a body's. A
// rewritten model replaces the query's, which is what the upstream reads;
// the tunnel's bytes are never changed. It returns why the query cannot be
// read, or "".
func (x *exchange) tunnelModel() string {
	model, start, end, err := queryModel(x.path)
	if err != nil {
		return err.Error()
	}
	if model == "" {
		return ""
	}
	x.pick.Model = model
	if target, _, source, named := x.targetOf(model); target != "" {
		x.rw.source, x.rw.named = source, named // counted even when the model stays, as rewriteModel does
		if target != model {
			x.pick.Model = target
			x.tunnelPath = x.path[:start] + url.QueryEscape(target) + x.path[end:]
		}
	}
	x.modelSeries(model)
	return ""
}

// queryModel returns the model parameter of path's query, decoded as a form
// value is ('+' a space), with the offsets of its raw value in path; "" when
// the query names none. A query that names it more than once is an error:
// servers differ on which one they read (vLLM's, Starlette's query_params,
// reads the last), so the tunnel could be routed as one model and served as
// another. A value that does not decode to UTF-8 of at most maxQueryModel
// bytes is an error.
func queryModel(path string) (model string, start, end int, err error) {
	i := strings.IndexByte(path, '?')
	if i < 0 {
		return "", 0, 0, nil
	}
	query := path[i+1:]
	if j := strings.IndexByte(query, '#'); j >= 0 {
		query = query[:j]
	}
	found := false
	for offset := i + 1; query != ""; {
		param, rest, _ := strings.Cut(query, "&")
		key, value, _ := strings.Cut(param, "=")
		if key == "model" || strings.ContainsAny(key, "%+") && unescaped(key) == "model" {
			if found {
				return "", 0, 0, errModelRepeated
			}
			found = true
			start, end = offset+len(key)+1, offset+len(key)+1+len(value)
			if len(value) > 3*maxQueryModel { // each byte is at most three escaped
				return "", 0, 0, errModelTooLong
			}
			if model, err = url.QueryUnescape(value); err != nil {
				return "", 0, 0, fmt.Errorf("the model in the query does not decode: %w", err)
			}
			if len(model) > maxQueryModel {
				return "", 0, 0, errModelTooLong
			}
			if !utf8.ValidString(model) {
				return "", 0, 0, errors.New("the model in the query is not UTF-8")
			}
		}
		offset += len(param) + 1
		query = rest
	}
	if model == "" {
		return "", 0, 0, nil
	}
	return model, start, end, nil
}

var errModelRepeated = errors.New("the query names the model parameter more than once; name it once")

var errModelTooLong = errors.New("the model in the query is over " + strconv.Itoa(maxQueryModel) + " bytes")

// unescaped is a query key decoded, or "" when it does not decode.
func unescaped(key string) string {
	k, err := url.QueryUnescape(key)
	if err != nil {
		return ""
	}
	return k
}
