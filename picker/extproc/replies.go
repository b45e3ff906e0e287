package extproc

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/picker/policy"
)

// replies holds the messages an exchange sends on the request path, built
// once per pooled exchange and refilled for every reply: gRPC has
// serialized a message by the time Send returns, so the next reply may
// reuse it. Replies that never change are shared package values.
type replies struct {
	route    *extprocv3.ProcessingResponse
	mutation *extprocv3.HeaderMutation
	set      []*corev3.HeaderValueOption // every option made so far; a reply uses a prefix
	dest     *structpb.Value_StringValue // the destination in envoy.lb metadata

	body     *extprocv3.ProcessingResponse
	reqBody  *extprocv3.ProcessingResponse_RequestBody
	respBody *extprocv3.ProcessingResponse_ResponseBody
	streamed *extprocv3.StreamedBodyResponse

	// The reply to the response headers that sets the session header
	// (session.go), made on first use.
	session      *extprocv3.ProcessingResponse
	sessionValue *corev3.HeaderValue

	// The metadata of the attributes a response reports and the reply to
	// the response trailers that carries it (attributes.go), made on
	// first use.
	usage    *usageMeta
	trailers *extprocv3.ProcessingResponse
}

func newReplies() *replies {
	r := &replies{
		mutation: &extprocv3.HeaderMutation{RemoveHeaders: ownedHeaders},
		dest:     &structpb.Value_StringValue{},
		streamed: &extprocv3.StreamedBodyResponse{},
	}
	r.route = &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{HeaderMutation: r.mutation, ClearRouteCache: true},
			},
		},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			lbNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				DestinationHeader: {Kind: r.dest},
			}}),
		}},
	}
	br := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: r.streamed}},
	}}
	r.reqBody = &extprocv3.ProcessingResponse_RequestBody{RequestBody: br}
	r.respBody = &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}
	r.body = &extprocv3.ProcessingResponse{}
	return r
}

// clear drops what the last exchange's replies referenced.
func (r *replies) clear() {
	r.dest.StringValue = ""
	r.streamed.Body = nil
	for _, o := range r.mutation.SetHeaders {
		o.Header.Key = ""
	}
	r.mutation.SetHeaders = r.mutation.SetHeaders[:0]
}

// setHeader appends an option that sets key to the route reply, and returns
// its header for the caller to append the value to.
func (r *replies) setHeader(key string) *corev3.HeaderValue {
	n := len(r.mutation.SetHeaders)
	if n == len(r.set) {
		r.set = append(r.set, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	o := r.set[n]
	o.Header.Key = key
	o.Header.RawValue = o.Header.RawValue[:0]
	r.mutation.SetHeaders = r.set[:n+1]
	return o.Header
}

// routeHeaders is the reply to the request headers once a destination is
// known: the destination header, the corrected content length (none when
// bodyLen is -1: not known), the removal of
// picker-owned headers, the request id when the picker made it (nil when
// not), the prefill pod's, the encode pod's and the data-parallel rank's
// addresses when the picker chose them ("" when not; the rank's when the
// destination is its pod's primary port), extra headers (trace context),
// and the same destination in envoy.lb metadata.
func (r *replies) routeHeaders(dest string, bodyLen int, hasBody bool, madeID []byte, prefiller, encoder, rank string, extra [][2]string) *extprocv3.ProcessingResponse {
	r.mutation.SetHeaders = r.mutation.SetHeaders[:0]
	named := 0
	if prefiller != "" {
		named |= namesPrefiller
	}
	if encoder != "" {
		named |= namesEncoder
	}
	if rank != "" {
		named |= namesRank
	}
	r.mutation.RemoveHeaders = ownedHeadersNaming[named]
	h := r.setHeader(DestinationHeader)
	h.RawValue = append(h.RawValue, dest...)
	if prefiller != "" {
		h = r.setHeader(policy.PrefillerHeader)
		h.RawValue = append(h.RawValue, prefiller...)
	}
	if encoder != "" {
		h = r.setHeader(policy.EncodersHeader)
		h.RawValue = append(h.RawValue, encoder...)
	}
	if rank != "" {
		h = r.setHeader(policy.DataParallelHeader)
		h.RawValue = append(h.RawValue, rank...)
	}
	if hasBody && bodyLen >= 0 {
		h = r.setHeader("content-length")
		h.RawValue = strconv.AppendInt(h.RawValue, int64(bodyLen), 10)
	}
	if madeID != nil {
		h = r.setHeader(RequestIDHeader)
		h.RawValue = append(h.RawValue, madeID...)
	}
	for _, kv := range extra {
		h = r.setHeader(kv[0])
		h.RawValue = append(h.RawValue, kv[1]...)
	}
	r.dest.StringValue = dest
	return r.route
}

// bodyChunks sends a request body back in chunks of at most maxChunk bytes,
// the last one marked end of stream when ends is set (trailers end the
// request otherwise). An empty body is one empty final chunk.
func (r *replies) bodyChunks(body []byte, ends bool, send func(*extprocv3.ProcessingResponse) error) error {
	for {
		n := min(len(body), maxChunk)
		last := n == len(body)
		if err := send(r.streamedBody(body[:n], last && ends, true)); err != nil {
			return err
		}
		if last {
			return nil
		}
		body = body[n:]
	}
}

// streamedBody is a body chunk passed on, of the request or the response.
func (r *replies) streamedBody(chunk []byte, eos, request bool) *extprocv3.ProcessingResponse {
	r.streamed.Body, r.streamed.EndOfStream = chunk, eos
	if request {
		r.body.Response = r.reqBody
	} else {
		r.body.Response = r.respBody
	}
	return r.body
}

// The replies that carry nothing of the request. They are only ever read
// (marshalled), so every stream shares them.
var (
	continueResponseHeaders = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}},
	}}
	continueRequestTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{},
	}}
	continueResponseTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{},
	}}
)
