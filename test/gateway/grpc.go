package gateway

import (
	"net/http"
	"strconv"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// AppProtocolH2C is the InferencePool appProtocol for HTTP/2 over cleartext,
// which Envoy-based gateways turn into an upstream cluster speaking h2c.
const AppProtocolH2C = "kubernetes.io/h2c"

// WithAppProtocol sets the pool's appProtocol: with AppProtocolH2C every
// upstream request goes over HTTP/2 cleartext (prior knowledge), as Envoy's
// cluster does with http2_protocol_options. A gRPC request goes over h2c
// whatever the appProtocol, since gRPC cannot run over HTTP/1.1.
func WithAppProtocol(p string) Option { return func(o *options) { o.appProtocol = p } }

// isGRPC reports whether r is a gRPC request as Envoy tells one
// (Grpc::Common::isGrpcRequestHeaders): content-type application/grpc, or
// application/grpc+<codec>; gRPC-Web is not.
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+")
}

// grpcStatusOf is the gRPC status Envoy gives a local reply with an HTTP
// status (Grpc::Utility::httpToGrpcStatus).
func grpcStatusOf(httpStatus int) int {
	switch httpStatus {
	case http.StatusBadRequest:
		return 13 // INTERNAL
	case http.StatusUnauthorized:
		return 16 // UNAUTHENTICATED
	case http.StatusForbidden:
		return 7 // PERMISSION_DENIED
	case http.StatusNotFound:
		return 12 // UNIMPLEMENTED
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return 14 // UNAVAILABLE
	}
	return 2 // UNKNOWN
}

// grpcMessage percent-encodes text for grpc-message, as the gRPC spec and
// Envoy's PercentEncoding::encode do: bytes outside printable ASCII and '%'.
func grpcMessage(text string) string {
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c < ' ' || c > '~' || c == '%' {
			b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)>>4, 16)) + strings.ToUpper(strconv.FormatUint(uint64(c)&15, 16)))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// grpcLocalReply is the trailers-only response Envoy's sendLocalReply makes
// for a gRPC request: :status 200, content-type application/grpc,
// grpc-status (grpcStatus when set, else mapped from the HTTP status) and
// grpc-message from the body, no body.
func grpcLocalReply(httpStatus int, grpcStatus *extprocv3.GrpcStatus, body string) *headerList {
	code := grpcStatusOf(httpStatus)
	if grpcStatus != nil {
		code = int(grpcStatus.GetStatus())
	}
	h := &headerList{}
	h.add(":status", "200")
	h.add("content-type", "application/grpc")
	h.add("grpc-status", strconv.Itoa(code))
	if body != "" {
		h.add("grpc-message", grpcMessage(body))
	}
	return h
}

// writeGRPCReply writes a trailers-only gRPC response: the headers alone,
// which net/http sends as one HEADERS frame ending the stream since the
// handler writes no body and does not flush.
func (f *flow) writeGRPCReply(h *headerList) {
	hdr := f.w.Header()
	for k, v := range h.httpHeader() {
		hdr[k] = v
	}
	f.status(h)
	f.w.WriteHeader(f.rec.Status)
	f.wroteHeader = true
}

// writeTrailers passes the upstream response's trailers (grpc-status and
// grpc-message for gRPC) to the client once its body is done.
func (f *flow) writeTrailers(resp *http.Response) {
	h := &headerList{}
	appendHeaders(h, resp.Trailer)
	f.writeTrailerList(h)
}

// writeTrailerList writes h as the response's trailers.
func (f *flow) writeTrailerList(h *headerList) {
	hdr := f.w.Header()
	for _, e := range h.entries {
		if strings.HasPrefix(e.GetKey(), ":") {
			continue
		}
		hdr.Add(http.TrailerPrefix+e.GetKey(), string(e.GetRawValue()))
	}
	if s := h.get("grpc-status"); s != "" {
		f.rec.GRPCStatus = s
	}
}
