package extproc

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/google/go-cmp/cmp"
)

// gatewayMessages are the messages of one request/response as a gateway
// sends them.
func gatewayMessages() []*extprocv3.ProcessingRequest {
	headers := func(eos bool, kv ...string) *extprocv3.HttpHeaders {
		h := &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{}, EndOfStream: eos}
		for i := 0; i < len(kv); i += 2 {
			h.Headers.Headers = append(h.Headers.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return h
	}
	return []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: headers(false,
			":method", "POST", ":path", "/v1/chat/completions", "content-type", "application/json", "content-length", "40")}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(`{"model":"m",`)}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(`"prompt":"hello there"}`), EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: headers(false, ":status", "200", "content-type", "text/event-stream")}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {\"choices\":[]}\n\n")}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte("data: [DONE]\n\n"), EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: &corev3.HeaderMap{
			Headers: []*corev3.HeaderValue{{Key: "grpc-status", Value: "0"}}}}}},
	}
}

func wire(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// receive decodes b into in with the server's codec, and reports whether
// the codec's own decoder took it (rather than proto.Unmarshal).
func receive(in *inbound, b []byte) (fast bool, err error) {
	fast = new(inbound).decode(b)
	return fast, newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, in)
}

func TestInboundDecodesAGatewaysMessagesInPlace(t *testing.T) {
	in := new(inbound)
	for round := range 2 { // the second round reuses what the first made
		for i, want := range gatewayMessages() {
			fast, err := receive(in, wire(t, want))
			if err != nil {
				t.Fatalf("round %d message %d: %v", round, i, err)
			}
			if !fast {
				t.Errorf("round %d message %d: decoded by proto.Unmarshal, want the in-place decoder", round, i)
			}
			if diff := cmp.Diff(want, &in.ProcessingRequest, protocmp.Transform()); diff != "" {
				t.Errorf("round %d message %d (-want +got):\n%s", round, i, diff)
			}
		}
		in.trim()
	}
}

func TestInboundReceivesAWarmStreamWithoutAllocating(t *testing.T) {
	msgs := gatewayMessages()
	bufs := make([]mem.BufferSlice, len(msgs))
	for i, m := range msgs {
		bufs[i] = mem.BufferSlice{mem.SliceBuffer(wire(t, m))}
	}
	in, c := new(inbound), newCodec()
	stream := func() {
		for _, b := range bufs {
			if err := c.Unmarshal(b, in); err != nil {
				t.Fatal(err)
			}
		}
		in.trim()
	}
	stream()
	// A new stream's header values are new strings; everything else is
	// reused: the wrappers, the header objects, the body buffer.
	if got := testing.AllocsPerRun(20, stream); got > float64(valuesOf(msgs)) {
		t.Errorf("receiving a stream on a warm inbound: %v allocations, want at most one per string header value (%d)", got, valuesOf(msgs))
	}
}

// valuesOf counts the string (not raw) header values of msgs.
func valuesOf(msgs []*extprocv3.ProcessingRequest) int {
	n := 0
	for _, m := range msgs {
		for _, hv := range append(m.GetRequestHeaders().GetHeaders().GetHeaders(), m.GetResponseTrailers().GetTrailers().GetHeaders()...) {
			if hv.Value != "" {
				n++
			}
		}
	}
	return n
}

func TestInboundLeavesWhatItDoesNotCoverToProto(t *testing.T) {
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	body := wire(t, gatewayMessages()[1])
	cases := map[string]struct {
		b        []byte
		wantErr  bool
		wantFast bool
	}{
		"metadata context beside the headers": {
			b: wire(t, &extprocv3.ProcessingRequest{
				Request: gatewayMessages()[0].Request,
				MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
					"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-subset": structpb.NewStringValue("10.0.0.1:8000")}}}},
			}),
			wantFast: true,
		},
		"attributes": {
			b: wire(t, &extprocv3.ProcessingRequest{Request: gatewayMessages()[0].Request,
				Attributes: map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {}}}),
		},
		"protocol config": {
			b: wire(t, &extprocv3.ProcessingRequest{Request: gatewayMessages()[0].Request,
				ProtocolConfig: &extprocv3.ProtocolConfiguration{SendBodyWithoutWaitingForHeaderResponse: true}}),
		},
		"two oneof members: the last one wins": {
			b: append(wire(t, gatewayMessages()[0]), body...),
		},
		"an unknown field": {b: append(tag(99, protowire.VarintType), 1)},
		"a header key that is not UTF-8": {
			b:       nest(nest(nest(nest([]byte("a\xffb"), 1), 1), 1), fieldRequestHeaders),
			wantErr: true,
		},
		"a truncated body":               {b: body[:len(body)-3], wantErr: true},
		"a field of the wrong wire type": {b: append(tag(fieldRequestBody, protowire.VarintType), 1)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			want := new(extprocv3.ProcessingRequest)
			wantErr := proto.Unmarshal(tc.b, want)
			if (wantErr != nil) != tc.wantErr {
				t.Fatalf("proto.Unmarshal: %v, want error %v", wantErr, tc.wantErr)
			}
			in := new(inbound)
			if _, err := receive(in, wire(t, gatewayMessages()[5])); err != nil { // a stream with history
				t.Fatal(err)
			}
			fast, err := receive(in, tc.b)
			if fast != tc.wantFast {
				t.Errorf("in-place decoder took it: %v, want %v", fast, tc.wantFast)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("codec: %v, want error %v", err, tc.wantErr)
			}
			if err == nil && !proto.Equal(want, &in.ProcessingRequest) {
				t.Errorf("codec decoded %v, proto.Unmarshal %v", &in.ProcessingRequest, want)
			}
		})
	}
}

// nest is b as length-delimited field num.
func nest(b []byte, num protowire.Number) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
}

// FuzzInbound holds the in-place decoder to proto.Unmarshal: whatever it
// accepts, it decodes to the same message, on a fresh inbound and on one
// that holds an earlier message.
func FuzzInbound(f *testing.F) {
	for _, m := range gatewayMessages() {
		f.Add(wire(f, m), 0)
	}
	f.Add(append(wire(f, gatewayMessages()[0]), wire(f, gatewayMessages()[2])...), 3)
	f.Fuzz(func(t *testing.T, b []byte, before int) {
		msgs := gatewayMessages()
		in := new(inbound)
		if before > 0 {
			if !in.decode(wire(t, msgs[before%len(msgs)])) {
				t.Fatal("a gateway message was not decoded in place")
			}
		}
		if !in.decode(b) {
			return
		}
		want := new(extprocv3.ProcessingRequest)
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatalf("decoded in place what proto.Unmarshal rejects: %v", err)
		}
		if !proto.Equal(want, &in.ProcessingRequest) {
			t.Fatalf("decoded in place %v, proto.Unmarshal %v", &in.ProcessingRequest, want)
		}
	})
}

// TestInboundForgetsHeaderFloodsWhenTheStreamEnds sends a message of many
// empty header values, which a few MiB can hold by the million: its stream
// decodes them, and the pooled message keeps none of them afterwards, while
// an ordinary stream's header values stay for reuse.
func TestInboundForgetsHeaderFloodsWhenTheStreamEnds(t *testing.T) {
	const n = 10_000
	flood := &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{}}
	for range n {
		flood.Headers.Headers = append(flood.Headers.Headers, &corev3.HeaderValue{})
	}
	in := new(inbound)
	fast, err := receive(in, wire(t, &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: flood}}))
	if err != nil || !fast {
		t.Fatalf("receive: fast %v, err %v", fast, err)
	}
	if got := len(in.GetRequestHeaders().GetHeaders().GetHeaders()); got != n {
		t.Fatalf("decoded %d header values, want %d", got, n)
	}
	in.trim()
	if got := len(in.maps[requestMap].values); got != 0 {
		t.Errorf("after the stream the request map keeps %d header values, want none", got)
	}

	if _, err := receive(in, wire(t, gatewayMessages()[0])); err != nil {
		t.Fatal(err)
	}
	in.trim()
	if got := len(in.maps[requestMap].values); got != 4 {
		t.Errorf("after an ordinary stream the request map keeps %d header values, want its 4", got)
	}
}

func TestPathValue(t *testing.T) {
	cases := map[string]struct {
		hv   *corev3.HeaderValue
		want string
	}{
		"a common path":        {hv: &corev3.HeaderValue{Key: ":path", RawValue: []byte("/v1/chat/completions")}, want: "/v1/chat/completions"},
		"another path":         {hv: &corev3.HeaderValue{Key: ":path", RawValue: []byte("/openai/v1/chat/completions?x=1")}, want: "/openai/v1/chat/completions?x=1"},
		"value, not raw_value": {hv: &corev3.HeaderValue{Key: ":path", Value: "/v1/completions"}, want: "/v1/completions"},
		"empty":                {hv: &corev3.HeaderValue{Key: ":path"}, want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := pathValue(tc.hv); got != tc.want {
				t.Errorf("pathValue = %q, want %q", got, tc.want)
			}
		})
	}
}
