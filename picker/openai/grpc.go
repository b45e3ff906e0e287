package openai

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// GRPCPrefixLen is the length of the prefix of a gRPC message: a flag
// byte (1: compressed) and the message's length, four bytes big-endian.
const GRPCPrefixLen = 5

// The fields of vLLM's engine API messages the picker reads
// (vllm_engine.proto, package vllm.grpc.engine).
const (
	// GenerateRequest: request_id = 1; oneof input { TokenizedInput
	// tokenized = 2; string text = 3; }; sampling_params = 4; bool stream = 5;
	// MultimodalInputs mm_inputs = 7 (newer releases: images' pixel values
	// and their placeholders' places in input_ids).
	genTokenized protowire.Number = 2
	genText      protowire.Number = 3
	genStream    protowire.Number = 5
	genMMInputs  protowire.Number = 7
	// EmbedRequest: request_id = 1; TokenizedInput tokenized = 2.
	embedTokenized protowire.Number = 2
	// TokenizedInput: string original_text = 1; repeated uint32 input_ids = 2.
	tokOriginalText protowire.Number = 1
	tokInputIDs     protowire.Number = 2
	// request_id of both requests.
	reqID protowire.Number = 1
)

// grpcFrame returns the one message a gRPC request body holds.
func grpcFrame(body []byte) ([]byte, error) {
	if len(body) < GRPCPrefixLen {
		return nil, fmt.Errorf("%w: %d bytes is shorter than a message's %d-byte prefix", ErrGRPCFrame, len(body), GRPCPrefixLen)
	}
	switch body[0] {
	case 0:
	case 1:
		return nil, fmt.Errorf("%w: the picker reads uncompressed messages only; send the request with no grpc-encoding", ErrGRPCCompressed)
	default:
		return nil, fmt.Errorf("%w: flag byte %d is neither 0 nor 1", ErrGRPCFrame, body[0])
	}
	n := uint64(binary.BigEndian.Uint32(body[1:GRPCPrefixLen]))
	rest := uint64(len(body) - GRPCPrefixLen)
	switch {
	case n > rest:
		return nil, fmt.Errorf("%w: the message is %d bytes, the body holds %d of them", ErrGRPCFrame, n, rest)
	case n < rest:
		return nil, fmt.Errorf("%w: %d bytes follow the %d-byte message; a unary request holds one message", ErrGRPCFrame, rest-n, n)
	}
	return body[GRPCPrefixLen:], nil
}

// ParseGRPC reads a gRPC request to vLLM's engine API (kind GRPCGenerate
// or GRPCEmbed: one message with its 5-byte prefix) into r, which it
// resets first. It reads the message in one pass over its wire format,
// as the model server's protobuf decoder reads it: unknown fields are
// skipped, a field given twice takes its last value (a TokenizedInput
// given twice is merged), and strings must be UTF-8. Errors wrap
// ErrGRPCFrame, ErrGRPCCompressed, ErrProto or ErrMissingInput; on error r
// holds partial results.
//
// The API names no model: Model is "". The prompt is the text (text, or
// tokenized.original_text), else the raw bytes of the input_ids' varints,
// so that requests whose token ids share a prefix share that prefix here
// too. Tokens is the number of input_ids when there are any, else the
// text's length at BytesPerToken bytes a token. Stream is the stream
// field (a Generate is answered by a stream of messages either way).
// Media is set when a GenerateRequest has mm_inputs, even empty: the
// server keys its image placeholders' blocks by the images' hashes, which
// the ids do not show.
func ParseGRPC(kind Kind, body []byte, r *Request) error {
	r.Reset()
	r.Kind = kind
	if !kind.GRPC() {
		return fmt.Errorf("%w: %v is not a method of the gRPC engine API", ErrGRPCFrame, kind)
	}
	msg, err := grpcFrame(body)
	if err != nil {
		return err
	}
	p := grpcParser{r: r}
	if err := p.request(msg); err != nil {
		return err
	}
	switch {
	case p.hasText:
		p.setText(p.text)
	case !p.hasTokenized:
		if kind == GRPCGenerate {
			return fmt.Errorf("%w: the GenerateRequest has neither text nor tokenized input", ErrMissingInput)
		}
		return fmt.Errorf("%w: the EmbedRequest has no tokenized input", ErrMissingInput)
	case len(p.original) > 0:
		p.setText(p.original)
	}
	// Otherwise the prompt is the ids' segments, appended as read.
	if p.ids > 0 {
		r.Tokens = p.ids
	}
	return nil
}

// grpcParser holds the state of one ParseGRPC call. While it reads, the
// request's Prompt holds the input_ids' segments.
type grpcParser struct {
	r *Request

	text, original        []byte
	hasText, hasTokenized bool
	ids                   int // input_ids read
}

// setText makes s the whole prompt.
func (p *grpcParser) setText(s []byte) {
	clear(p.r.Prompt)
	p.r.Prompt = p.r.Prompt[:0]
	if len(s) > 0 {
		p.r.Prompt = append(p.r.Prompt, s)
	}
	p.r.Tokens = len(s) / BytesPerToken
}

// request reads a GenerateRequest or an EmbedRequest.
func (p *grpcParser) request(b []byte) error {
	gen := p.r.Kind == GRPCGenerate
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protoError("tag", n)
		}
		b = b[n:]
		switch {
		case num == reqID && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protoError("request_id", n)
			}
			if !utf8.Valid(v) {
				return fmt.Errorf("%w: request_id is not UTF-8", ErrProto)
			}
			b = b[n:]
			continue
		case gen && num == genText && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protoError("text", n)
			}
			if !utf8.Valid(v) {
				return fmt.Errorf("%w: text is not UTF-8", ErrProto)
			}
			// The oneof's other case is dropped, its ids with it.
			p.text, p.hasText, p.hasTokenized, p.original, p.ids = v, true, false, nil, 0
			p.setText(nil)
			clear(p.r.InputIDs)
			p.r.InputIDs = p.r.InputIDs[:0]
			b = b[n:]
			continue
		case (gen && num == genTokenized || !gen && num == embedTokenized) && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protoError("tokenized", n)
			}
			if p.hasText { // the oneof's other case is dropped
				p.text, p.hasText = nil, false
			}
			p.hasTokenized = true
			if err := p.tokenized(v); err != nil {
				return err
			}
			b = b[n:]
			continue
		case gen && num == genMMInputs && typ == protowire.BytesType:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protoError("mm_inputs", n)
			}
			p.r.Media = true
			b = b[n:]
			continue
		case gen && num == genStream && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protoError("stream", n)
			}
			p.r.Stream = v != 0
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protoError(fmt.Sprintf("field %d", num), n)
		}
		b = b[n:]
	}
	return nil
}

// tokenized reads a TokenizedInput into the one read so far, merging as
// protobuf merges a message given twice.
func (p *grpcParser) tokenized(b []byte) error {
	r := p.r
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protoError("tokenized tag", n)
		}
		b = b[n:]
		switch {
		case num == tokOriginalText && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protoError("original_text", n)
			}
			if !utf8.Valid(v) {
				return fmt.Errorf("%w: original_text is not UTF-8", ErrProto)
			}
			p.original = v
			b = b[n:]
			continue
		case num == tokInputIDs && typ == protowire.BytesType: // packed
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return protoError("input_ids", n)
			}
			ids, ok := countVarints(v)
			if !ok {
				return fmt.Errorf("%w: input_ids: a packed varint is cut short or overflows", ErrProto)
			}
			p.ids += ids
			if len(v) > 0 {
				r.Prompt = append(r.Prompt, v)
				r.InputIDs = append(r.InputIDs, v)
			}
			b = b[n:]
			continue
		case num == tokInputIDs && typ == protowire.VarintType: // one id, unpacked
			_, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protoError("input_ids", n)
			}
			r.Prompt = append(r.Prompt, b[:n])
			r.InputIDs = append(r.InputIDs, b[:n])
			p.ids++
			b = b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protoError(fmt.Sprintf("tokenized field %d", num), n)
		}
		b = b[n:]
	}
	return nil
}

// countVarints counts the varints of a packed field, and reports whether
// each is whole and fits in 64 bits, as protobuf requires.
func countVarints(b []byte) (n int, ok bool) {
	run := 0 // continuation bytes in a row
	for _, c := range b {
		if c < 0x80 {
			if run == 9 && c > 1 {
				return n, false
			}
			n, run = n+1, 0
			continue
		}
		run++
		if run == 10 {
			return n, false
		}
	}
	return n, run == 0
}

func protoError(what string, n int) error {
	return fmt.Errorf("%w: %s: %w", ErrProto, what, protowire.ParseError(n))
}

// TokenIDs appends the token ids of r.InputIDs to dst, as the model
// server reads them (an id past 32 bits keeps its low 32, as protobuf
// reads a uint32), and returns it.
func (r *Request) TokenIDs(dst []uint32) []uint32 {
	for _, seg := range r.InputIDs {
		for len(seg) > 0 {
			v, n := protowire.ConsumeVarint(seg)
			if n < 0 { // ParseGRPC checked every segment: not reached
				break
			}
			dst = append(dst, uint32(v))
			seg = seg[n:]
		}
	}
	return dst
}
