package extproc

import (
	"bytes"
	"slices"
	"strconv"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/inferpick/inferpick/picker/policy"
)

// TestCodecRoundTrip: every reply the server sends, and a message of
// another service, reads back as what was marshalled. The replies are
// refilled in place between sends, as a stream does.
func TestCodecRoundTrip(t *testing.T) {
	c := newCodec()
	r := newReplies()
	big := bytes.Repeat([]byte("x"), 3*maxChunk)
	tests := map[string]func() proto.Message{
		"route, one endpoint": func() proto.Message { return r.routeHeaders("10.0.0.1:8000", 1234, true, nil, "", "", "", nil) },
		"route, fallbacks": func() proto.Message {
			return r.routeHeaders("10.0.0.1:8000,10.0.0.2:8000", 0, false, []byte("id-1"), "10.0.0.9:8000", "10.0.0.7:8000", "", [][2]string{{"traceparent", "00-1"}})
		},
		"route, primary port and rank": func() proto.Message {
			return r.routeHeaders("10.0.0.1:9000", 0, false, []byte("id-1"), "10.0.0.9:8000", "", "10.0.0.1:8001", [][2]string{{"traceparent", "00-1"}})
		},
		"request body chunk":  func() proto.Message { return r.streamedBody(big[:maxChunk], false, true) },
		"last response chunk": func() proto.Message { return r.streamedBody([]byte("data: [DONE]\n\n"), true, false) },
		"empty final chunk":   func() proto.Message { return r.streamedBody(nil, true, true) },
		"response headers":    func() proto.Message { return continueResponseHeaders },
		"request trailers":    func() proto.Message { return continueRequestTrailers },
		"immediate response":  func() proto.Message { return immediate(429, "the pool is saturated") },
		"another service": func() proto.Message {
			return &grpc_health_v1.HealthCheckResponse{Status: grpc_health_v1.HealthCheckResponse_SERVING}
		},
		"route after a big one": func() proto.Message { return r.routeHeaders("10.0.0.3:8000", 7, true, nil, "", "", "", nil) },
	}
	for name, msg := range tests {
		t.Run(name, func(t *testing.T) {
			m := msg()
			data, want := marshalBoth(t, c, m)
			if got := data.Materialize(); len(got) != len(want) {
				t.Errorf("marshalled %d bytes, want %d", len(got), len(want))
			}
			got := m.ProtoReflect().New().Interface()
			if err := c.Unmarshal(data, got); err != nil {
				t.Fatal(err)
			}
			data.Free()
			if diff := cmp.Diff(m, got, protocmp.Transform()); diff != "" {
				t.Errorf("read back (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRouteRepliesAreRefilled: a reply built for one request carries
// nothing of the one before.
func TestRouteRepliesAreRefilled(t *testing.T) {
	r := newReplies()
	r.routeHeaders("10.0.0.1:9000", 100, true, []byte("a"), "10.0.0.9:8000", "10.0.0.7:8000", "10.0.0.1:8001", [][2]string{{"traceparent", "00-1"}})
	got := r.routeHeaders("10.0.0.3:8000", 0, false, nil, "", "", "", nil)
	want := &extprocv3.ProcessingResponse{}
	if err := proto.Unmarshal(mustMarshal(t, got), want); err != nil {
		t.Fatal(err)
	}
	set := want.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()
	if len(set) != 1 || set[0].GetHeader().GetKey() != DestinationHeader || string(set[0].GetHeader().GetRawValue()) != "10.0.0.3:8000" {
		t.Errorf("set headers = %v, want only the destination 10.0.0.3:8000", set)
	}
	if v := want.GetDynamicMetadata().GetFields()[lbNamespace].GetStructValue().GetFields()[DestinationHeader].GetStringValue(); v != "10.0.0.3:8000" {
		t.Errorf("envoy.lb destination = %q, want 10.0.0.3:8000", v)
	}
	if rm := want.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !slices.Contains(rm, policy.PrefillerHeader) || !slices.Contains(rm, policy.EncodersHeader) || !slices.Contains(rm, policy.DataParallelHeader) {
		t.Errorf("removed headers = %v, want the prefill pod's, the encode pods' and the rank's headers among them", rm)
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	data, err := newCodec().Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	defer data.Free()
	return data.Materialize()
}

// TestMarshalledMessagesOwnTheirSlices: gRPC writes a message after Send
// returns, so no message marshalled later, on any stream, may change the
// slice that carries one still waiting to be written.
func TestMarshalledMessagesOwnTheirSlices(t *testing.T) {
	c := newCodec()
	var held []mem.BufferSlice
	var want [][]byte
	for i := range 3 * slabSlots {
		data, b := marshalBoth(t, c, newReplies().streamedBody([]byte(strconv.Itoa(i)), true, false))
		if len(data) != 1 || cap(data) != 1 {
			t.Fatalf("message %d: a slice of length %d, capacity %d; want one buffer that an append cannot spill over", i, len(data), cap(data))
		}
		held, want = append(held, data), append(want, b)
	}
	for i, data := range held {
		if got := data.Materialize(); !bytes.Equal(got, want[i]) {
			t.Errorf("message %d reads %q once others were marshalled, want %q", i, got, want[i])
		}
		data.Free()
	}
}

// TestReusedBuffersReadAsMarshalled: a reply buffer comes back from the pool
// as the last reply left it, and the next reply in it reads as that reply
// alone.
func TestReusedBuffersReadAsMarshalled(t *testing.T) {
	c := newCodec()
	for _, n := range []int{maxChunk, maxChunk - 100, 5000, 4000, 10} {
		data, want := marshalBoth(t, c, newReplies().streamedBody(bytes.Repeat([]byte{byte('a' + n%26)}, n), false, true))
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Errorf("a %d-byte chunk's reply differs from proto.Marshal's", n)
		}
		data.Free()
	}
}

// TestReplyPoolTiers: a buffer is taken from the smallest tier that holds
// it; sizes above the largest tier, and buffers the pool did not make, are
// left to the garbage collector.
func TestReplyPoolTiers(t *testing.T) {
	var p replyPool
	for _, tc := range []struct{ size, capacity int }{
		{0, 4 << 10}, {1, 4 << 10}, {4 << 10, 4 << 10}, {4<<10 + 1, 8 << 10},
		{maxChunk + 64, 64 << 10}, {128 << 10, 128 << 10}, {128<<10 + 1, 128<<10 + 1},
	} {
		b := p.Get(tc.size)
		if len(*b) != tc.size || cap(*b) != tc.capacity {
			t.Errorf("Get(%d): length %d, capacity %d; want %d, %d", tc.size, len(*b), cap(*b), tc.size, tc.capacity)
		}
		p.Put(b)
	}
	odd := make([]byte, 5000)
	p.Put(&odd)
	if b := p.Get(5000); cap(*b) != 8<<10 {
		t.Errorf("Get(5000) after putting a 5000-byte buffer: capacity %d, want the tier's 8192", cap(*b))
	}
}

// marshalBoth is m marshalled by the codec, and by proto.Marshal.
func marshalBoth(t *testing.T, c codec, m proto.Message) (mem.BufferSlice, []byte) {
	t.Helper()
	data, err := c.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return data, want
}
