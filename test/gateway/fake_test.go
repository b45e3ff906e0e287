package gateway

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// fakePicker is a minimal ext_proc server that picks fixed endpoints.
type fakePicker struct {
	extprocv3.UnimplementedExternalProcessorServer

	// endpoints is the destination value; viaHeader sends it as the header only.
	endpoints string
	viaHeader bool
	// metadataEndpoints, when set, is the metadata's destination in place
	// of endpoints (the header keeps endpoints).
	metadataEndpoints string
	// body replaces the request body when set.
	body []byte
	// immediate answers the request with this ImmediateResponse.
	immediate *extprocv3.ImmediateResponse
	// stall never answers the request.
	stall bool

	mu   sync.Mutex
	msgs []*extprocv3.ProcessingRequest
	// ended receives the stream context's error when a Process call returns.
	ended chan error
}

func newFakePicker(t *testing.T, p *fakePicker) string {
	t.Helper()
	p.ended = make(chan error, 16)
	return servePicker(t, p)
}

// servePicker serves p as an ext_proc server on a free local port until
// the test ends and returns its address.
func servePicker(t *testing.T, p extprocv3.ExternalProcessorServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func (p *fakePicker) received() []*extprocv3.ProcessingRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*extprocv3.ProcessingRequest(nil), p.msgs...)
}

func (p *fakePicker) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := stream.Context()
	defer func() { p.ended <- ctx.Err() }()
	var body []byte
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.msgs = append(p.msgs, req)
		p.mu.Unlock()
		var out []*extprocv3.ProcessingResponse
		switch r := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			if r.RequestHeaders.GetEndOfStream() {
				out = p.answerRequest(nil, false)
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			body = append(body, r.RequestBody.GetBody()...)
			if r.RequestBody.GetEndOfStream() {
				out = p.answerRequest(body, true)
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
					HeaderMutation: setHeaders("x-picker-seen-status", "yes"),
				}},
			}}}
		case *extprocv3.ProcessingRequest_ResponseBody:
			out = []*extprocv3.ProcessingResponse{streamed(false, r.ResponseBody.GetBody(), r.ResponseBody.GetEndOfStream())}
		}
		for _, m := range out {
			if err := stream.Send(m); err != nil {
				return err
			}
		}
	}
}

func (p *fakePicker) answerRequest(body []byte, hasBody bool) []*extprocv3.ProcessingResponse {
	switch {
	case p.stall:
		return nil
	case p.immediate != nil:
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: p.immediate}}}
	}
	mut := setHeaders(KeyDestination, p.endpoints, "x-picked", "yes")
	mut.RemoveHeaders = []string{"x-remove-me"}
	headers := &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: true},
		}},
	}
	if !p.viaHeader {
		inMetadata := p.endpoints
		if p.metadataEndpoints != "" {
			inMetadata = p.metadataEndpoints
		}
		headers.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
			NamespaceLB: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				KeyDestination: structpb.NewStringValue(inMetadata),
			}}),
		}}
	}
	out := []*extprocv3.ProcessingResponse{headers}
	if !hasBody {
		return out
	}
	if p.body != nil {
		body = p.body
	}
	// Two chunks, to show the gateway streams what it gets back.
	half := len(body) / 2
	return append(out, streamed(true, body[:half], false), streamed(true, body[half:], true))
}

func setHeaders(kv ...string) *extprocv3.HeaderMutation {
	m := &extprocv3.HeaderMutation{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.SetHeaders = append(m.SetHeaders, &corev3.HeaderValueOption{
			Header: &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])},
		})
	}
	return m
}

func streamed(request bool, body []byte, end bool) *extprocv3.ProcessingResponse {
	b := &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_StreamedResponse{
			StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: end},
		}},
	}}
	if request {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: b}}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: b}}
}

func immediate(code typev3.StatusCode, body string) *extprocv3.ImmediateResponse {
	return &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: code},
		Headers: setHeaders("x-picker-error", "yes"),
		Body:    []byte(body),
	}
}
