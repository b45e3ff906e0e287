package extproc

import (
	"strconv"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"

	"github.com/inferpick/inferpick/picker/registry"
)

// A gRPC request (content-type application/grpc, such as a call to vLLM's
// gRPC engine API) is answered as gRPC: a refusal is a trailers-only
// response, HTTP 200 with grpc-status and grpc-message, and a response
// fails when its grpc-status is not OK, whatever its HTTP status.

// isGRPC reports whether a content-type is gRPC's, as Envoy's router tells
// a gRPC request: application/grpc, or application/grpc+ a codec's name.
// application/grpc-web is not: Envoy's grpc_web filter makes such a call
// gRPC, and the picker sees it as gRPC when that filter runs before
// ext_proc.
func isGRPC(h *corev3.HeaderValue) bool {
	const media = "application/grpc"
	v := h.GetRawValue()
	if len(v) == 0 {
		v = []byte(h.GetValue())
	}
	return len(v) >= len(media) && string(v[:len(media)]) == media &&
		(len(v) == len(media) || v[len(media)] == '+')
}

// maxQuotedContentType is how much of a content-type a refusal quotes.
const maxQuotedContentType = 64

// notGRPCReason is the reason a request to a gRPC method's path whose
// content-type is not gRPC's is refused: it names the content-type it
// came with, quoted and cut to maxQuotedContentType bytes.
func notGRPCReason(hs []*corev3.HeaderValue) string {
	got := "no content-type"
	for _, hv := range hs {
		if hv.GetKey() != "content-type" {
			continue
		}
		v := textValue(hv)
		if len(v) > maxQuotedContentType {
			i := maxQuotedContentType
			for i > 0 && !utf8.RuneStart(v[i]) {
				i--
			}
			v = v[:i] + "..."
		}
		got = "content-type " + strconv.Quote(v)
	}
	return "a gRPC method's path with " + got + ", which is not gRPC's: send application/grpc (a gRPC-Web call needs Envoy's grpc_web filter ahead of ext_proc)"
}

// grpcCode is the gRPC status of a refusal the picker would answer over
// HTTP with status. The picker knows what each refusal means, so it uses
// the code of that meaning rather than gRPC's mapping of an HTTP status
// from an unknown origin (under which 400 is INTERNAL): a request the
// model server would not read is INVALID_ARGUMENT; a body over the limit
// RESOURCE_EXHAUSTED, as gRPC reports a message over its size limit; a
// saturated pool (429) and no endpoint (503) UNAVAILABLE, the transient
// condition a client retries with backoff, as gRPC's mapping has them.
func grpcCode(status int) codes.Code {
	switch status {
	case 400:
		return codes.InvalidArgument
	case 404:
		return codes.NotFound
	case 413:
		return codes.ResourceExhausted
	case 429, 502, 503, 504:
		return codes.Unavailable
	case 500:
		return codes.Internal
	default:
		return codes.Unknown
	}
}

// immediateGRPC is a local reply to a gRPC request. Envoy answers it as a
// trailers-only response: HTTP 200, content-type application/grpc, the
// grpc-status given (a grpc-status header would win over it, so none is
// set), and the body, percent-encoded, as grpc-message; the grpc-message
// header says the same for a gateway that does not.
func immediateGRPC(status int, message string) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setHeader("content-type", "application/grpc"),
				setHeader("grpc-message", percentEncode(message)),
			}},
			Body:       []byte(message),
			GrpcStatus: &extprocv3.GrpcStatus{Status: uint32(grpcCode(status))},
			Details:    "inferpick_" + errorType(status),
		},
	}}
}

// percentEncode encodes a grpc-message as gRPC's HTTP/2 protocol says:
// bytes outside printable ASCII, and '%', as %XX.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			n++
		}
	}
	if n == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, s[i])
	}
	return string(b)
}

// grpcStatusOf returns the grpc-status among headers (response trailers,
// or the headers of a trailers-only response), -1 when there is none or
// it is not a status (grpcStatusValue).
func grpcStatusOf(headers []*corev3.HeaderValue) int {
	for _, hv := range headers {
		if hv.GetKey() == "grpc-status" {
			return grpcStatusValue(hv)
		}
	}
	return -1
}

// grpcStatusValue reads a grpc-status header: a code, a number from 0,
// or -1 for anything else. A gRPC client takes a status it cannot read
// as a failure, and so does the picker: only 0 is OK.
func grpcStatusValue(hv *corev3.HeaderValue) int {
	if n, err := strconv.Atoi(headerValue(hv)); err == nil && n >= 0 {
		return n
	}
	return -1
}

// checkGRPCModels logs when gRPC requests come to a pool whose pods report
// more than one base model. vLLM's gRPC engine API names no model, so
// every pod must serve the one the clients mean; with two, a call gets
// whichever its pod runs. The pods' lists are read again only when one
// changes (registry.ServedEpoch), so a gRPC request costs one atomic load.
func (s *Server) checkGRPCModels() {
	epoch := registry.ServedEpoch() + 1
	last := s.grpcModels.Load()
	if last == epoch || !s.grpcModels.CompareAndSwap(last, epoch) {
		return
	}
	first := ""
	for _, w := range s.reg.Workers() {
		m := w.Metrics()
		if m == nil || m.Served == nil {
			continue
		}
		for _, base := range m.Served.Bases {
			if first == "" {
				first = base
			} else if base != first {
				s.opts.Log.Info("gRPC requests reach pods serving more than one base model; the gRPC engine API names no model, so a pool that serves gRPC must serve one",
					"models", []string{first, base}, "pod", w.Address())
				return
			}
		}
	}
}
