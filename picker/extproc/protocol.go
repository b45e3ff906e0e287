package extproc

import (
	"encoding/json"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Header and metadata names of the endpoint-picker protocol.
const (
	// DestinationHeader carries the picked endpoint, then its fallbacks:
	// "ip:port[,ip:port...]". Also the key in the envoy.lb metadata namespace.
	DestinationHeader = "x-gateway-destination-endpoint"
	// ServedHeader names the endpoint that actually served the request, in the
	// envoy.lb namespace of the response metadata.
	ServedHeader = "x-gateway-destination-endpoint-served"
	// SubsetKey restricts the candidates, in the envoy.lb.subset_hint namespace.
	SubsetKey = "x-gateway-destination-endpoint-subset"

	lbNamespace     = "envoy.lb"
	subsetNamespace = "envoy.lb.subset_hint"

	// maxChunk is the largest body chunk returned to the gateway.
	maxChunk = 62000
)

// ownedHeaders are request headers removed before the request goes
// upstream: those only the picker may set (the destination is overwritten),
// and the objective and fairness headers the picker consumes.
var ownedHeaders = []string{ServedHeader, SubsetKey, ObjectiveHeader, FairnessHeader}

// headerValue returns a header's value, preferring raw_value as Envoy sends it.
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// routeHeaders is the reply to the request headers once a destination is
// known: the destination header, the corrected content length, the removal of
// picker-owned headers, extra headers (the request id when the picker made
// it, trace context), and the same destination in envoy.lb metadata.
func routeHeaders(dest string, bodyLen int, hasBody bool, extra [][2]string) *extprocv3.ProcessingResponse {
	set := make([]*corev3.HeaderValueOption, 1, 2+len(extra))
	set[0] = setHeader(DestinationHeader, dest)
	if hasBody {
		set = append(set, setHeader("content-length", strconv.Itoa(bodyLen)))
	}
	for _, kv := range extra {
		set = append(set, setHeader(kv[0], kv[1]))
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{
					HeaderMutation: &extprocv3.HeaderMutation{
						SetHeaders:    set,
						RemoveHeaders: ownedHeaders,
					},
					ClearRouteCache: true,
				},
			},
		},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			lbNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				DestinationHeader: structpb.NewStringValue(dest),
			}}),
		}},
	}
}

// bodyChunks sends body back in chunks of at most maxChunk bytes, the last
// one marked end of stream. An empty body is one empty final chunk.
func bodyChunks(body []byte, request bool, send func(*extprocv3.ProcessingResponse) error) error {
	for {
		n := min(len(body), maxChunk)
		last := n == len(body)
		if err := send(streamedBody(body[:n], last, request)); err != nil {
			return err
		}
		if last {
			return nil
		}
		body = body[n:]
	}
}

func streamedBody(chunk []byte, eos, request bool) *extprocv3.ProcessingResponse {
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: chunk, EndOfStream: eos},
		}},
	}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}
}

func continueResponseHeaders() *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}},
	}}
}

func continueTrailers(request bool) *extprocv3.ProcessingResponse {
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{},
		}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{},
	}}
}

// immediate is a local reply from the gateway with an OpenAI-style JSON error.
func immediate(status int, message string) *extprocv3.ProcessingResponse {
	type apiError struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	}
	body, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{apiError{Message: message, Type: errorType(status), Code: status}})
	headers := []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	if status == 429 {
		// Overload passes: tell the client when to try again.
		headers = append(headers, setHeader("retry-after", "1"))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: headers},
			Body:    body,
			Details: "inferpick_" + errorType(status),
		},
	}}
}

func errorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "overloaded"
	case 503:
		return "no_endpoint"
	default:
		return "internal_error"
	}
}
