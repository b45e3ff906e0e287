package extproc

import (
	"fmt"
	"math/bits"
	"runtime"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// vtMarshaler is the marshalling code go-control-plane generates with
// vtprotobuf for every Envoy message: no reflection, no intermediate buffer.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

// replyBuffers is the pool of marshalled replies' buffers: one sync.Pool
// per power of two from 4 KiB (above gRPC's threshold for giving a buffer
// back, 1 KiB) to 128 KiB, which holds the largest reply (a body chunk of
// maxChunk bytes). A marshaller writes every byte of the buffer it asks for,
// so, unlike gRPC's default pool, which clears the whole of a buffer it
// hands out again (a 1 MiB one for any message over 32 KiB), these are
// handed out as they were left.
var replyBuffers replyPool

const (
	minReplyShift = 12
	maxReplyShift = 17
)

type replyPool struct {
	tiers [maxReplyShift - minReplyShift + 1]sync.Pool
}

// tier is the index of the smallest tier holding size bytes, or -1 for a
// size above the largest.
func (*replyPool) tier(size int) int {
	shift := max(bits.Len(uint(max(size, 1)-1)), minReplyShift)
	if shift > maxReplyShift {
		return -1
	}
	return shift - minReplyShift
}

// Get is a buffer of length size, its contents whatever was last written.
func (p *replyPool) Get(size int) *[]byte {
	t := p.tier(size)
	if t < 0 {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<(t+minReplyShift))
	return &b
}

// Put keeps buf for its tier when it was made for one.
func (p *replyPool) Put(buf *[]byte) {
	if t := p.tier(cap(*buf)); t >= 0 && cap(*buf) == 1<<(t+minReplyShift) {
		p.tiers[t].Put(buf)
	}
}

// codec is the ext_proc server's wire codec. Replies, which are all Envoy
// messages, are marshalled by their generated vtprotobuf code (by proto
// reflection in a build without it) into buffers of gRPC's pool; messages
// of older APIs, and every received message that inbound does not cover,
// go through the standard proto codec.
type codec struct {
	proto encoding.CodecV2
}

func newCodec() codec { return codec{proto: encoding.GetCodecV2(grpcproto.Name)} }

// Name is the proto codec's: the wire format is the same.
func (codec) Name() string { return grpcproto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return c.proto.Marshal(v)
	}
	buf, err := marshalReply(m, 0)
	if err != nil {
		return nil, fmt.Errorf("marshal %T: %w", v, err)
	}
	return oneBuffer(mem.NewBuffer(buf, &replyBuffers)), nil
}

// marshalReply marshals m into a buffer of replyBuffers, after prefix bytes
// left for the caller: the buffer holds prefix plus m's size. An Envoy
// message goes through its generated vtprotobuf code, anything else (or
// any message in a build without it) through proto reflection.
func marshalReply(m proto.Message, prefix int) (*[]byte, error) {
	if vt, ok := m.(vtMarshaler); ok {
		size := vt.SizeVT()
		buf := replyBuffers.Get(prefix + size)
		n, err := vt.MarshalToSizedBufferVTStrict((*buf)[prefix:])
		return marshalled(buf, n, size, err)
	}
	size := proto.Size(m)
	buf := replyBuffers.Get(prefix + size)
	// Of size bytes, the message fits the buffer: MarshalAppend fills it
	// in place.
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:prefix], m)
	return marshalled(buf, len(out)-prefix, size, err)
}

// marshalled returns buf, into which n bytes of a size-byte message were
// marshalled; after an error it goes back to the pool.
func marshalled(buf *[]byte, n, size int, err error) (*[]byte, error) {
	if err == nil && n != size {
		err = fmt.Errorf("marshalled %d bytes of a %d-byte message", n, size)
	}
	if err != nil {
		replyBuffers.Put(buf)
		return nil, err
	}
	return buf, nil
}

// slabSlots is how many marshalled messages share one slab.
const slabSlots = 64

// slab is an array of BufferSlice elements handed out one at a time: each
// marshalled message is carried by a one-element slice of it, so that
// marshalling allocates no slice of its own. gRPC holds that slice until
// the message is written, after Send returns, so a slot is never handed
// out twice; the array is collected once the last of its messages is
// written.
type slab struct{ free mem.BufferSlice }

var slabs = sync.Pool{New: func() any { return new(slab) }}

// oneBuffer returns a slice holding b alone, in a slot of a slab.
func oneBuffer(b mem.Buffer) mem.BufferSlice {
	s := slabs.Get().(*slab)
	if len(s.free) == 0 {
		s.free = make(mem.BufferSlice, slabSlots)
	}
	one := s.free[:1:1]
	s.free = s.free[1:]
	slabs.Put(s)
	one[0] = b
	return one
}

// Unmarshal decodes a stream's inbound message in place (see inbound) and
// anything else, or what that does not cover, with the proto codec.
func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if in, ok := v.(*inbound); ok && decodeBuffers(data, in) {
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// decodeBuffers decodes data into in; a message split over several
// buffers is first joined in a buffer of gRPC's pool.
func decodeBuffers(data mem.BufferSlice, in *inbound) bool {
	if len(data) == 1 {
		return in.decode(data[0].ReadOnlyData())
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return in.decode(buf.ReadOnlyData())
}

// Codec is the ext_proc server's wire codec, the one ServerOptions installs.
func Codec() encoding.CodecV2 { return newCodec() }

// Flow-control windows of the ext_proc server. A stream's window holds a
// typical request body (a gateway sends it before it reads any reply), and
// fixed windows spare each connection the pings of gRPC's window estimation.
const (
	streamWindow = 1 << 20
	connWindow   = 8 << 20
)

// ServerOptions are the gRPC server options the ext_proc service is built
// for: its codec, and flow-control windows large enough that a request body
// of a few hundred kilobytes arrives without waiting for window updates.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(newCodec()),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	}
}
