package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

func TestMain(m *testing.M) {
	code := m.Run()
	framework.RemoveBinaries()
	os.Exit(code)
}

// routeTo is an ext_proc server that sends every request to one endpoint,
// or answers it with an ImmediateResponse, streaming bodies through
// unchanged.
type routeTo struct {
	extprocv3.UnimplementedExternalProcessorServer
	endpoint  string
	immediate *extprocv3.ImmediateResponse
	// trailers, when set, is the reply to the response trailers; nil
	// answers them unchanged. ignoreTrailers never answers them.
	trailers       *extprocv3.ProcessingResponse
	ignoreTrailers bool
	// got receives the kind of each message, response body chunks with
	// "|eos" on the one that ends the body.
	got chan string
}

func startRouteTo(t *testing.T, p *routeTo) string {
	t.Helper()
	return gateway.ServePicker(t, p)
}

func (p *routeTo) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	var body []byte
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if p.got != nil {
			p.got <- messageKind(req)
		}
		var out []*extprocv3.ProcessingResponse
		switch r := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			switch {
			case p.ignoreTrailers:
			case p.trailers != nil:
				out = append(out, p.trailers)
			default:
				out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
					ResponseTrailers: &extprocv3.TrailersResponse{},
				}})
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			body = append(body, r.RequestBody.GetBody()...)
			if r.RequestBody.GetEndOfStream() {
				out = p.route(body)
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{},
			}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			out = append(out, gateway.Streamed(false, r.ResponseBody.GetBody(), r.ResponseBody.GetEndOfStream()))
		}
		for _, m := range out {
			if err := stream.Send(m); err != nil {
				return err
			}
		}
	}
}

func messageKind(req *extprocv3.ProcessingRequest) string {
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return "request_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		return "request_body"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return "response_headers"
	case *extprocv3.ProcessingRequest_ResponseBody:
		if r.ResponseBody.GetEndOfStream() {
			return "response_body|eos"
		}
		return "response_body"
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		var kv []string
		for _, h := range r.ResponseTrailers.GetTrailers().GetHeaders() {
			kv = append(kv, h.GetKey()+"="+string(h.GetRawValue()))
		}
		return "response_trailers " + strings.Join(kv, " ")
	}
	return fmt.Sprintf("%T", req.GetRequest())
}

func (p *routeTo) route(body []byte) []*extprocv3.ProcessingResponse {
	if p.immediate != nil {
		return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: p.immediate}}}
	}
	headers := &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: gateway.SetHeaders(gateway.KeyDestination, p.endpoint)},
		}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			gateway.NamespaceLB: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				gateway.KeyDestination: structpb.NewStringValue(p.endpoint),
			}}),
		}},
	}
	return []*extprocv3.ProcessingResponse{headers, gateway.Streamed(true, body, true)}
}

// startSim runs a vllm-sim with its gRPC API until the test ends.
func startSim(t *testing.T, args ...string) *framework.Sim {
	t.Helper()
	bin := framework.Binary(t, framework.SimPackage)
	return framework.StartSimT(t, bin, "127.0.0.1", 0, append(append([]string{"--time-scale", "0.01", "--block-size", "4"}, framework.SimGRPCArgs...), args...)...)
}

func TestGRPCStreamsThroughTheGateway(t *testing.T) {
	sim := startSim(t)
	gw := framework.StartGatewayT(t, startRouteTo(t, &routeTo{endpoint: sim.GRPCAddr}), gateway.WithAppProtocol(gateway.AppProtocolH2C))
	c := framework.DialGRPC(t, gw.Addr)
	prompt := strings.Repeat("the same long system prompt, ", 6)

	first := framework.Generate(t.Context(), c, framework.GenerateRequest("a", prompt, 8, true))
	if first.Code != codes.OK || first.Complete == nil || len(first.Tokens) != 8 || first.Chunks == 0 {
		t.Fatalf("first call through the gateway: %+v; want OK, 8 streamed tokens and a completion", first)
	}
	second := framework.Generate(t.Context(), c, framework.GenerateRequest("b", prompt, 8, true))
	if second.Code != codes.OK || second.CachedTokens <= first.CachedTokens {
		t.Errorf("repeat: status %v, cached_tokens %d after %d; want OK and more cached", second.Code, second.CachedTokens, first.CachedTokens)
	}
	recs := gw.WaitRecords(t, 2)
	for _, r := range recs {
		if r.Served != sim.GRPCAddr || r.GRPCStatus != "0" || r.Status != 200 {
			t.Errorf("record: served %q grpc-status %q status %d; want %s, 0 and 200", r.Served, r.GRPCStatus, r.Status, sim.GRPCAddr)
		}
	}
}

func TestGRPCUpstreamErrorsReachTheClient(t *testing.T) {
	tests := map[string]struct {
		endpoint   func(sim *framework.Sim) string
		simArgs    []string
		want       codes.Code
		wantInText string
	}{
		"trailers-only answer of the model server": {
			endpoint:   func(sim *framework.Sim) string { return sim.GRPCAddr },
			simArgs:    []string{"--fault-error-rate", "1", "--fault-error-status", "503"},
			want:       codes.Unavailable,
			wantInText: "simulated failure",
		},
		"no upstream to connect to": {
			endpoint:   func(*framework.Sim) string { return "127.0.0.1:1" },
			want:       codes.Unavailable,
			wantInText: "upstream connect error",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sim := startSim(t, tc.simArgs...)
			gw := framework.StartGatewayT(t, startRouteTo(t, &routeTo{endpoint: tc.endpoint(sim)}),
				gateway.WithAppProtocol(gateway.AppProtocolH2C), gateway.WithRetryPolicy(gateway.RetryPolicy{MaxAttempts: 1}))
			res := framework.Generate(t.Context(), framework.DialGRPC(t, gw.Addr), framework.GenerateRequest("", "hello", 4, true))
			if res.Code != tc.want || !strings.Contains(res.Message, tc.wantInText) {
				t.Errorf("status %v %q, want %v with %q", res.Code, res.Message, tc.want, tc.wantInText)
			}
		})
	}
}

func TestGRPCImmediateResponseIsTrailersOnly(t *testing.T) {
	tests := map[string]struct {
		imm      *extprocv3.ImmediateResponse
		wantCode codes.Code
		wantMsg  string
	}{
		"429 is UNAVAILABLE": {
			imm:      &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}, Body: []byte("every endpoint is saturated")},
			wantCode: codes.Unavailable, wantMsg: "every endpoint is saturated",
		},
		"400 is INTERNAL": {
			imm:      &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadRequest}, Body: []byte("no model")},
			wantCode: codes.Internal, wantMsg: "no model",
		},
		"404 is UNIMPLEMENTED": {
			imm:      &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_NotFound}},
			wantCode: codes.Unimplemented,
		},
		"503 is UNAVAILABLE, message percent-encoded": {
			imm:      &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}, Body: []byte("100% gone ✗\n")},
			wantCode: codes.Unavailable, wantMsg: "100% gone ✗\n",
		},
		"grpc_status wins": {
			imm: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
				GrpcStatus: &extprocv3.GrpcStatus{Status: uint32(codes.ResourceExhausted)}, Body: []byte("slow down")},
			wantCode: codes.ResourceExhausted, wantMsg: "slow down",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gw := framework.StartGatewayT(t, startRouteTo(t, &routeTo{immediate: tc.imm}), gateway.WithAppProtocol(gateway.AppProtocolH2C))
			ctx, cancel := context.WithTimeout(t.Context(), framework.Timeout)
			defer cancel()
			res := framework.Generate(ctx, framework.DialGRPC(t, gw.Addr), framework.GenerateRequest("", "hello", 4, true))
			if res.Code != tc.wantCode || res.Message != tc.wantMsg {
				t.Errorf("status %v %q, want %v %q", res.Code, res.Message, tc.wantCode, tc.wantMsg)
			}
			if res.Chunks != 0 || res.Complete != nil {
				t.Errorf("%d chunks and completion %v with the immediate response, want none", res.Chunks, res.Complete)
			}
			rec := gw.WaitRecords(t, 1)[0]
			if !rec.Immediate || rec.Status != 200 || rec.GRPCStatus != strconv.Itoa(int(tc.wantCode)) {
				t.Errorf("record: immediate %v status %d grpc-status %q; want an immediate 200 with grpc-status %d", rec.Immediate, rec.Status, rec.GRPCStatus, tc.wantCode)
			}
		})
	}
}

func TestGRPCClientCancelReachesTheModelServer(t *testing.T) {
	sim := startSim(t, "--time-scale", "1") // 20 ms a token: 500 tokens take 10 s
	gw := framework.StartGatewayT(t, startRouteTo(t, &routeTo{endpoint: sim.GRPCAddr}), gateway.WithAppProtocol(gateway.AppProtocolH2C))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := framework.DialGRPC(t, gw.Addr).Generate(ctx, framework.GenerateRequest("long", "a long answer", 500, true))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); err != nil || r.Chunk == nil {
		t.Fatalf("first response %v, %v; want a chunk", r, err)
	}
	cancel()
	framework.Eventually(t, framework.Timeout, "the model server aborting the request", func() error {
		st, err := sim.Stats(t.Context())
		if err != nil {
			return err
		}
		if st.Aborted != 1 || st.Running != 0 {
			return fmt.Errorf("aborted %d running %d, want 1 and 0", st.Aborted, st.Running)
		}
		return nil
	})
	if rec := gw.WaitRecords(t, 1)[0]; !rec.ClientGone {
		t.Errorf("record %+v, want the client gone", rec)
	}
}
