package openai

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
)

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// genChunk is a framed GenerateResponse carrying a chunk.
func genChunk(ids []uint64, prompt, completion, cached uint64) []byte {
	var c []byte
	if len(ids) > 0 {
		c = protowire.AppendTag(c, 1, protowire.BytesType)
		c = protowire.AppendBytes(c, packedIDs(ids...))
	}
	c = appendUint(appendUint(appendUint(c, 2, prompt), 3, completion), 4, cached)
	return frame(embedded(respChunk, c))
}

// genComplete is a framed GenerateResponse carrying the complete message.
func genComplete(ids []uint64, reason string, prompt, completion, cached uint64) []byte {
	var c []byte
	if len(ids) > 0 {
		c = protowire.AppendTag(c, 1, protowire.BytesType)
		c = protowire.AppendBytes(c, packedIDs(ids...))
	}
	c = appendString(c, 2, reason)
	c = appendUint(appendUint(appendUint(c, 3, prompt), 4, completion), 5, cached)
	return frame(embedded(respComplete, c))
}

// embedResponse is a framed EmbedResponse of dim floats.
func embedResponse(dim int, prompt uint64) []byte {
	var floats []byte
	for i := range dim {
		floats = protowire.AppendFixed32(floats, uint32(i))
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, floats)
	return frame(appendUint(appendUint(b, 2, prompt), 3, uint64(dim)))
}

// compressed marks a framed message compressed (its bytes stand for
// the compressed ones: the scanner reads none of them).
func compressed(framed []byte) []byte {
	return append([]byte{1}, framed[1:]...)
}

func TestStreamScannerGRPC(t *testing.T) {
	tests := map[string]struct {
		kind   Kind
		body   []byte
		events Events
		usage  Usage
	}{
		// As vLLM's servicer streams: each chunk counts the tokens it
		// carries, and the complete message repeats the last chunk's.
		"generate stream: the chunks' counts add up": {
			kind: GRPCGenerate,
			body: bytes.Join([][]byte{
				genChunk([]uint64{11}, 2000, 1, 1500),
				genChunk([]uint64{12, 13}, 2000, 2, 1500),
				genChunk([]uint64{14}, 2000, 1, 1500),
				genComplete([]uint64{14}, "stop", 2000, 1, 1500),
			}, nil),
			events: FirstToken | UsageSeen,
			usage:  Usage{PromptTokens: 2000, CompletionTokens: 4, TotalTokens: 2004, CachedTokens: 1500},
		},
		"generate stream: a complete with no tokens adds none": {
			kind: GRPCGenerate,
			body: bytes.Join([][]byte{
				genChunk([]uint64{11, 12, 13}, 30, 3, 0),
				genChunk([]uint64{14}, 30, 1, 0),
				genComplete(nil, "stop", 30, 0, 0),
			}, nil),
			events: FirstToken | UsageSeen,
			usage:  Usage{PromptTokens: 30, CompletionTokens: 4, TotalTokens: 34},
		},
		"generate not streamed, n=2: a complete per sequence, each its full count": {
			kind: GRPCGenerate,
			body: bytes.Join([][]byte{
				genComplete([]uint64{1, 2, 3}, "stop", 10, 3, 4),
				genComplete([]uint64{5, 6}, "length", 10, 2, 4),
			}, nil),
			events: FirstToken | UsageSeen,
			usage:  Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15, CachedTokens: 4},
		},
		"generate, not streamed: one complete": {
			kind:   GRPCGenerate,
			body:   genComplete([]uint64{1, 2, 3, 4}, "length", 10, 4, 0),
			events: FirstToken | UsageSeen,
			usage:  Usage{PromptTokens: 10, CompletionTokens: 4, TotalTokens: 14},
		},
		"a chunk without tokens is not the first token": {
			kind:   GRPCGenerate,
			body:   genChunk(nil, 7, 0, 0),
			events: UsageSeen,
			usage:  Usage{PromptTokens: 7, TotalTokens: 7},
		},
		"unknown fields in every message are skipped": {
			kind: GRPCGenerate,
			body: frame(append(protowire.AppendFixed64(protowire.AppendTag(appendString(nil, 9, "x"), 8, protowire.Fixed64Type), 1),
				genComplete(nil, "stop", 5, 6, 0)[GRPCPrefixLen:]...)),
			events: FirstToken | UsageSeen,
			usage:  Usage{PromptTokens: 5, CompletionTokens: 6, TotalTokens: 11},
		},
		"embed": {
			kind:   GRPCEmbed,
			body:   embedResponse(1024, 42),
			events: FirstToken | UsageSeen,
			usage:  Usage{PromptTokens: 42, TotalTokens: 42},
		},
		"another method: its message is output": {
			kind:   Unknown,
			body:   frame(appendBool(nil, 1, true)),
			events: FirstToken,
		},
		"a compressed message, once whole, is output; the scanner stops there": {
			kind: GRPCGenerate,
			body: bytes.Join([][]byte{
				compressed(genChunk([]uint64{1}, 5, 1, 0)),
				genComplete([]uint64{1}, "stop", 5, 1, 0),
			}, nil),
			events: FirstToken,
		},
		"a compressed message cut short is not output yet": {
			kind:   GRPCGenerate,
			body:   compressed(genChunk([]uint64{1}, 5, 1, 0))[:9],
			events: 0,
		},
		"a compressed embed response is output": {
			kind:   GRPCEmbed,
			body:   compressed(embedResponse(4, 3)),
			events: FirstToken,
		},
		"flag byte 2 stops the scanner": {
			kind:   GRPCGenerate,
			body:   append([]byte{2}, genComplete([]uint64{1}, "stop", 5, 6, 0)[1:]...),
			events: 0,
		},
		"a field past its message stops the scanner": {
			kind:   GRPCGenerate,
			body:   append(frame([]byte{0x0a, 50, 0x10, 1}), genComplete(nil, "stop", 5, 6, 0)...),
			events: 0,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// Whole, then split at every byte: the same events and usage.
			for split := 0; split <= len(tc.body); split++ {
				var s StreamScanner
				s.ResetGRPC(tc.kind)
				ev := s.Feed(tc.body[:split])
				ev |= s.Feed(tc.body[split:])
				ev |= s.End()
				if ev != tc.events {
					t.Fatalf("split at %d: events %v, want %v", split, ev, tc.events)
				}
				if diff := cmp.Diff(tc.usage, s.Usage()); diff != "" {
					t.Fatalf("split at %d: usage (-want +got):\n%s", split, diff)
				}
			}
		})
	}
}

func TestStreamScannerGRPCAllocatesNothing(t *testing.T) {
	chunks := [][]byte{genChunk([]uint64{1}, 100, 1, 0), genChunk([]uint64{2}, 100, 1, 0), genComplete([]uint64{2}, "stop", 100, 1, 0)}
	var s StreamScanner
	if n := testing.AllocsPerRun(100, func() {
		s.ResetGRPC(GRPCGenerate)
		for _, c := range chunks {
			s.Feed(c)
		}
	}); n != 0 {
		t.Errorf("a gRPC response allocated %v times, want 0", n)
	}
}

// FuzzStreamScannerGRPC feeds any bytes, split anywhere: never a panic,
// and the same events and usage as when fed whole.
func FuzzStreamScannerGRPC(f *testing.F) {
	f.Add(uint8(GRPCGenerate), 3, append(genChunk([]uint64{1}, 5, 1, 0), genComplete([]uint64{1}, "stop", 5, 1, 0)...))
	f.Add(uint8(GRPCEmbed), 7, embedResponse(4, 3))
	f.Add(uint8(Unknown), 1, frame([]byte{8, 1}))
	f.Add(uint8(GRPCGenerate), 2, append(compressed(genChunk([]uint64{1}, 5, 1, 0)), 1, 0, 0, 0, 0))
	f.Fuzz(func(t *testing.T, kind uint8, split int, body []byte) {
		k := Kind(kind % 7)
		var whole, parts StreamScanner
		whole.ResetGRPC(k)
		want := whole.Feed(body)
		parts.ResetGRPC(k)
		var got Events
		if split <= 0 {
			split = 1
		}
		for rest := body; len(rest) > 0; {
			n := min(split, len(rest))
			got |= parts.Feed(rest[:n])
			rest = rest[n:]
		}
		if got != want || whole.Usage() != parts.Usage() {
			t.Fatalf("fed in %d-byte chunks: %v %+v; whole: %v %+v", split, got, parts.Usage(), want, whole.Usage())
		}
	})
}
