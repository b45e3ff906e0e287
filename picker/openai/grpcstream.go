package openai

import "google.golang.org/protobuf/encoding/protowire"

// grpcScan is where a StreamScanner stands in a gRPC response body: a
// stream of messages, each with its 5-byte prefix, read byte by byte as
// chunks split them anywhere. It holds no byte of the body: a varint is
// accumulated as it comes and every other field is skipped by its
// length, so that a message costs no memory whatever its size.
type grpcScan struct {
	kind  Kind // the method: GRPCGenerate, GRPCEmbed, or Unknown for another
	phase grpcPhase

	prefix     int    // prefix bytes read
	length     uint32 // the message's length, from its prefix
	compressed bool   // the message's flag byte is 1
	left       int    // bytes of the current message not read yet
	// subLeft is what is left of the sub-message being read (a
	// GenerateResponse's chunk or complete), -1 at the top level; sub is
	// its field number there.
	subLeft int
	sub     protowire.Number

	num   protowire.Number // the field being read
	v     uint64           // the varint being read
	shift uint
	skip  int // bytes of the field to skip

	// What the current message says.
	tokens                     bool // it carries output token ids
	prompt, completion, cached uint32

	// What the messages read so far add up to: a streamed Generate's
	// chunks each count the tokens they carry (a delta), and so does its
	// complete message (the last delta, or nothing new); a Generate not
	// streamed sends a complete message per sequence, each with its
	// sequence's count.
	chunked                uint64 // the chunks' completion tokens, summed
	completes              uint64 // the complete messages' completion tokens, summed
	sawChunk               bool   // a chunk came: the call is streamed
	lastPrompt, lastCached uint32 // the latest message's counts
}

type grpcPhase uint8

const (
	phPrefix grpcPhase = iota // the message's prefix
	phTag                     // a field's tag
	phVarint                  // a varint field's value
	phLength                  // a length-delimited field's length
	phSkip                    // bytes to skip
)

// The fields of the engine API's responses the scanner reads.
const (
	// GenerateResponse: oneof { chunk = 1; complete = 2; }.
	respChunk    protowire.Number = 1
	respComplete protowire.Number = 2
	// GenerateStreamChunk: token_ids = 1, prompt_tokens = 2,
	// completion_tokens = 3, cached_tokens = 4. GenerateComplete:
	// output_ids = 1, finish_reason = 2, prompt_tokens = 3,
	// completion_tokens = 4, cached_tokens = 5.
	outIDs protowire.Number = 1
	// EmbedResponse: embedding = 1, prompt_tokens = 2, embedding_dim = 3.
	embedPromptTokens protowire.Number = 2
)

// ResetGRPC prepares s for the response to a gRPC request, of kind
// GRPCGenerate or GRPCEmbed (or Unknown, another method). It reads each
// response message as it arrives, holding none of it: a Generate
// message with output token ids (a chunk's, or the complete message) is
// FirstToken, and so is an Embed response. No message is Done: a call
// sends a complete message per sequence (sampling_params.n of them) and
// can still fail after one, so a gRPC call ends with its trailers;
// and the usage is the latest message's prompt_tokens and cached_tokens
// with the completion tokens of the whole call: the chunks'
// completion_tokens summed (each counts the tokens it carries), or, when
// no chunk came (the call was not streamed), the complete messages'
// (TotalTokens the sum of prompt and completion). Another method's
// first message is FirstToken. A malformed message stops the scanner,
// which then reports nothing more; the response's status is
// in its trailers, which the scanner does not see. A compressed message
// cannot be read: once it has come whole it is FirstToken (output exists,
// though its counts are unknown) and the scanner stops there.
func (s *StreamScanner) ResetGRPC(kind Kind) {
	s.Reset(false)
	s.grpc = true
	if !kind.GRPC() {
		kind = Unknown
	}
	s.g = grpcScan{kind: kind, subLeft: -1}
}

func (s *StreamScanner) feedGRPC(chunk []byte) Events {
	g := &s.g
	var ev Events
	for len(chunk) > 0 {
		switch g.phase {
		case phPrefix:
			n := min(GRPCPrefixLen-g.prefix, len(chunk))
			for _, c := range chunk[:n] {
				if g.prefix == 0 {
					if c > 1 { // not a gRPC message at all
						s.stopped = true
						return ev
					}
					g.compressed = c == 1
				} else {
					g.length = g.length<<8 | uint32(c)
				}
				g.prefix++
			}
			chunk = chunk[n:]
			if g.prefix < GRPCPrefixLen {
				return ev
			}
			g.left, g.subLeft, g.phase = int(g.length), -1, phTag
			g.tokens, g.prompt, g.completion, g.cached, g.sub = false, 0, 0, 0, 0
			if g.compressed && g.left == 0 {
				s.stopped = true // see below: an empty compressed message is whole
				return ev | FirstToken
			}
			if g.compressed {
				g.phase, g.skip = phSkip, g.left
			}
		case phSkip:
			n := min(g.skip, len(chunk))
			chunk = chunk[n:]
			g.skip -= n
			g.consumed(n)
			if g.skip == 0 && g.compressed {
				// A whole message the scanner cannot read: output
				// exists, and nothing more can be read of the call.
				s.stopped = true
				return ev | FirstToken
			}
			if g.skip == 0 {
				g.phase = phTag
			}
		default:
			c := chunk[0]
			chunk = chunk[1:]
			if g.left == 0 || g.subLeft == 0 || g.shift > 63 {
				s.stopped = true // a field runs past its message, or a varint past 10 bytes
				return ev
			}
			g.consumed(1)
			g.v |= uint64(c&0x7f) << g.shift
			g.shift += 7
			if c >= 0x80 {
				continue
			}
			v := g.v
			g.v, g.shift = 0, 0
			if !g.field(v) {
				s.stopped = true
				return ev
			}
		}
		if g.phase == phTag && g.subLeft == 0 {
			g.subLeft = -1
		}
		if g.phase == phTag && g.left == 0 {
			ev |= s.grpcMessage()
			g.phase, g.prefix, g.length = phPrefix, 0, 0
		}
	}
	return ev
}

// consumed counts n bytes read of the current message.
func (g *grpcScan) consumed(n int) {
	g.left -= n
	if g.subLeft > 0 {
		g.subLeft -= n
	}
}

// field takes the varint just read: a tag, a value or a length. It
// reports false for what protobuf would not read.
func (g *grpcScan) field(v uint64) bool {
	switch g.phase {
	case phTag:
		num, typ := protowire.DecodeTag(v)
		if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
			return false
		}
		g.num = num
		switch typ {
		case protowire.VarintType:
			g.phase = phVarint
		case protowire.BytesType:
			g.phase = phLength
		case protowire.Fixed32Type:
			g.phase, g.skip = phSkip, 4
		case protowire.Fixed64Type:
			g.phase, g.skip = phSkip, 8
		default: // groups: no encoder of the engine API writes them
			return false
		}
		if g.phase == phSkip && (g.skip > g.left || g.subLeft >= 0 && g.skip > g.subLeft) {
			return false
		}
	case phVarint:
		g.value(uint32(v))
		g.phase = phTag
	case phLength:
		if v > uint64(g.left) || g.subLeft >= 0 && v > uint64(g.subLeft) {
			return false
		}
		n := int(v)
		if g.kind == GRPCGenerate && g.subLeft < 0 && (g.num == respChunk || g.num == respComplete) {
			if g.num != g.sub { // the oneof's other case replaces the one read
				g.tokens, g.prompt, g.completion, g.cached = false, 0, 0, 0
			}
			g.sub, g.subLeft, g.phase = g.num, n, phTag
			return true
		}
		if g.kind == GRPCGenerate && g.subLeft >= 0 && g.num == outIDs && n > 0 {
			g.tokens = true
		}
		g.phase, g.skip = phSkip, n
		if n == 0 {
			g.phase = phTag
		}
	}
	return true
}

// value takes a varint field's value.
func (g *grpcScan) value(v uint32) {
	if g.kind == GRPCEmbed && g.num == embedPromptTokens {
		g.prompt = v
	}
	if g.kind != GRPCGenerate || g.subLeft < 0 {
		return
	}
	if g.num == outIDs { // one id, unpacked
		g.tokens = true
		return
	}
	n := g.num
	if g.sub == respComplete {
		n-- // finish_reason comes before the complete message's counts
	}
	switch n {
	case 2:
		g.prompt = v
	case 3:
		g.completion = v
	case 4:
		g.cached = v
	}
}

// grpcMessage reports what the message just read says.
func (s *StreamScanner) grpcMessage() Events {
	g := &s.g
	var ev Events
	switch g.kind {
	case GRPCGenerate:
		if g.tokens || g.sub == respComplete {
			ev |= FirstToken
		}
	case GRPCEmbed:
		ev |= FirstToken
	default:
		return FirstToken
	}
	switch g.sub {
	case respChunk:
		g.chunked += uint64(g.completion)
		g.sawChunk = true
	case respComplete:
		g.completes += uint64(g.completion)
	}
	if g.prompt == 0 && g.completion == 0 {
		return ev
	}
	if g.prompt > 0 {
		g.lastPrompt, g.lastCached = g.prompt, g.cached
	}
	completion := g.completes
	if g.sawChunk {
		completion = g.chunked
	}
	s.usage = Usage{PromptTokens: int(g.lastPrompt), CompletionTokens: int(completion),
		TotalTokens: int(g.lastPrompt) + int(completion), CachedTokens: int(g.lastCached)}
	return ev | UsageSeen
}
