package gateway_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// drain returns what the processor has been sent so far.
func drain(got chan string) []string {
	var out []string
	for {
		select {
		case m := <-got:
			out = append(out, m)
		default:
			return out
		}
	}
}

// The upstream's trailers go to the processor as response_trailers after
// the last body chunk, which then does not end the body; the client gets
// them as the reply mutated them, and the reply's dynamic metadata is the
// request's.
func TestResponseTrailersGoThroughTheProcessor(t *testing.T) {
	sim := startSim(t)
	reply := &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{
			HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
				Header: &corev3.HeaderValue{Key: "x-picker-trailer", RawValue: []byte("seen")},
			}}},
		}},
		DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			gateway.NamespaceLB: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"x-gateway-inference-request-cost": structpb.NewNumberValue(10),
			}}),
		}},
	}
	p := &routeTo{endpoint: sim.GRPCAddr, trailers: reply, got: make(chan string, 1024)}
	gw := framework.StartGatewayT(t, startRouteTo(t, p), gateway.WithAppProtocol(gateway.AppProtocolH2C))

	res := framework.Generate(t.Context(), framework.DialGRPC(t, gw.Addr), framework.GenerateRequest("t", "hello there", 8, true))
	if res.Code != codes.OK || len(res.Tokens) != 8 {
		t.Fatalf("call: %v %q with %d tokens; want OK with 8", res.Code, res.Message, len(res.Tokens))
	}
	if diff := cmp.Diff([]string{"seen"}, res.Trailer.Get("x-picker-trailer")); diff != "" {
		t.Errorf("the processor's trailer at the client (-want +got):\n%s", diff)
	}
	rec := gw.WaitRecords(t, 1)[0]
	if rec.GRPCStatus != "0" || rec.DynamicMetadata["x-gateway-inference-request-cost"] != float64(10) {
		t.Errorf("record: grpc-status %q, envoy.lb %v; want 0 and the cost the trailers reply set", rec.GRPCStatus, rec.DynamicMetadata)
	}

	msgs := drain(p.got)
	if slices.Contains(msgs, "response_body|eos") {
		t.Errorf("messages %q: a body chunk ended the body, want the trailers to end it", msgs)
	}
	if n := len(msgs); n == 0 || !strings.HasPrefix(msgs[n-1], "response_trailers ") || !strings.Contains(msgs[n-1], "grpc-status=0") {
		t.Errorf("messages %q: want response_trailers with grpc-status 0 last", msgs)
	}
	if i := slices.Index(msgs, "response_body"); i < 0 || i > len(msgs)-2 {
		t.Errorf("messages %q: want response body chunks before the trailers", msgs)
	}
}

// A processor that never answers the trailers holds them back from the
// client: with a message timeout the stream is reset, never ended as OK.
func TestResponseTrailersWaitForTheReply(t *testing.T) {
	sim := startSim(t)
	p := &routeTo{endpoint: sim.GRPCAddr, ignoreTrailers: true}
	gw := framework.StartGatewayT(t, startRouteTo(t, p),
		gateway.WithAppProtocol(gateway.AppProtocolH2C), gateway.WithMessageTimeout(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), framework.Timeout)
	defer cancel()

	res := framework.Generate(ctx, framework.DialGRPC(t, gw.Addr), framework.GenerateRequest("t", "hello there", 8, true))
	if res.Code == codes.OK || res.Code == codes.DeadlineExceeded {
		t.Errorf("call ended %v %q; want the stream reset when the trailers reply does not come", res.Code, res.Message)
	}
	if len(res.Tokens) != 8 {
		t.Errorf("%d tokens before the trailers, want the 8 of the body", len(res.Tokens))
	}
	rec := gw.WaitRecords(t, 1)[0]
	if !errors.Is(rec.ProcessingError, gateway.ErrMessageTimeout) || !rec.Reset {
		t.Errorf("record: processing error %v, reset %v; want a message timeout and a reset", rec.ProcessingError, rec.Reset)
	}
}
