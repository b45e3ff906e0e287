// Package extproctest runs the ext_proc server without a transport, for
// benchmarks that measure the picker alone.
package extproctest

import (
	"context"
	"io"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Chunk is the request-body chunk size a gateway sends (Envoy's default
// buffer).
const Chunk = 16 << 10

// MemStream is an ext_proc stream held in memory: Recv hands out the
// request headers of a chat completion and its body in Chunk-sized pieces,
// then the response Respond added, if any, then io.EOF; RecvMsg decodes the same messages from their wire form with
// the stream's codec, as a gRPC stream does; Send counts the replies.
// Rewind replays it.
type MemStream struct {
	grpc.ServerStream
	ctx   context.Context
	codec encoding.CodecV2
	msgs  []*extprocv3.ProcessingRequest
	wire  []mem.BufferSlice
	next  int
	// Replies is how many replies the server sent since the last Rewind.
	Replies int
}

var _ extprocv3.ExternalProcessor_ProcessServer = (*MemStream)(nil)

// NewMemStream returns a stream carrying one request with body, whose
// RecvMsg decodes with codec.
func NewMemStream(ctx context.Context, codec encoding.CodecV2, body []byte) *MemStream {
	st := &MemStream{ctx: ctx, codec: codec}
	st.msgs = append(st.msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("POST")},
			{Key: ":path", RawValue: []byte("/v1/chat/completions")},
			{Key: "content-length", RawValue: []byte(strconv.Itoa(len(body)))},
		}}}}})
	for off := 0; off < len(body); off += Chunk {
		end := min(off+Chunk, len(body))
		st.msgs = append(st.msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: body[off:end], EndOfStream: end == len(body)}}})
	}
	st.encode()
	return st
}

// Respond adds a 200 response to the stream after the request: its headers
// with contentType, then its body in the given chunks, the last one ending
// the stream.
func (st *MemStream) Respond(contentType string, chunks ...string) {
	st.msgs = append(st.msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte("200")},
			{Key: "content-type", RawValue: []byte(contentType)},
		}}}}})
	for i, c := range chunks {
		st.msgs = append(st.msgs, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte(c), EndOfStream: i == len(chunks)-1}}})
	}
	st.encode()
}

// encode makes the wire form of the messages that have none yet.
func (st *MemStream) encode() {
	for _, m := range st.msgs[len(st.wire):] {
		b, err := proto.Marshal(m)
		if err != nil {
			panic(err) // the messages above always marshal
		}
		st.wire = append(st.wire, mem.BufferSlice{mem.SliceBuffer(b)})
	}
}

// Rewind makes the stream hand out its messages again from the first.
func (st *MemStream) Rewind() { st.next, st.Replies = 0, 0 }

// Context returns the stream's context.
func (st *MemStream) Context() context.Context { return st.ctx }

// Recv returns the next message, io.EOF after the last.
func (st *MemStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if st.next == len(st.msgs) {
		return nil, io.EOF
	}
	st.next++
	return st.msgs[st.next-1], nil
}

// RecvMsg decodes the next message into m, io.EOF after the last.
func (st *MemStream) RecvMsg(m any) error {
	if st.next == len(st.wire) {
		return io.EOF
	}
	st.next++
	return st.codec.Unmarshal(st.wire[st.next-1], m)
}

// Send counts a reply.
func (st *MemStream) Send(*extprocv3.ProcessingResponse) error {
	st.Replies++
	return nil
}

// BodyLen is the length of the request body the stream carries.
func (st *MemStream) BodyLen() int {
	n := 0
	for _, m := range st.msgs {
		n += len(m.GetRequestBody().GetBody())
	}
	return n
}
