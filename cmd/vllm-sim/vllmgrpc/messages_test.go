package vllmgrpc

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
)

func TestGenerateRequestRoundTrip(t *testing.T) {
	n := uint32(7)
	tests := map[string]GenerateRequest{
		"text":      {RequestID: "r1", Text: "hello", MaxTokens: &n, Stream: true},
		"tokenized": {RequestID: "r2", Tokenized: &TokenizedInput{OriginalText: "hi", InputIDs: []uint32{1, 300, 1 << 31}}},
		"n":         {Text: "x", N: 2},
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			var got GenerateRequest
			if err := got.Unmarshal(want.Marshal()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestGenerateRequestSkipsUnknownFieldsAndReadsUnpackedIDs(t *testing.T) {
	// tokenized with input_ids unpacked, then an unknown fixed32 field, a
	// sampling_params with temperature (1, float) and max_tokens 9.
	var tok []byte
	for _, id := range []uint32{5, 6} {
		tok = protowire.AppendTag(tok, 2, protowire.VarintType)
		tok = protowire.AppendVarint(tok, uint64(id))
	}
	b := putMessage(nil, 2, tok)
	b = protowire.AppendTag(b, 99, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 1)
	sp := protowire.AppendTag(nil, 1, protowire.Fixed32Type)
	sp = protowire.AppendFixed32(sp, 0x3f800000)
	sp = putUint(sp, 8, 9)
	b = putMessage(b, 4, sp)
	var got GenerateRequest
	if err := got.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	nine := uint32(9)
	want := GenerateRequest{Tokenized: &TokenizedInput{InputIDs: []uint32{5, 6}}, MaxTokens: &nine}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestUnmarshalRefusesMalformed(t *testing.T) {
	tests := map[string][]byte{
		"truncated length": {0x1a, 0x05, 'a'},
		"bad tag":          {0x00},
		"text as varint":   {0x18, 0x01},
		"group":            {0x0b},
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			var r GenerateRequest
			if err := r.Unmarshal(b); !errors.Is(err, ErrMalformed) {
				t.Errorf("Unmarshal(%x) = %v, want ErrMalformed", b, err)
			}
		})
	}
}

func TestGenerateResponseRoundTrip(t *testing.T) {
	tests := map[string]GenerateResponse{
		"chunk":    {Chunk: &Chunk{TokenIDs: []uint32{1, 2}, PromptTokens: 10, CompletionTokens: 2, CachedTokens: 8}},
		"complete": {Complete: &Complete{OutputIDs: []uint32{1, 2, 3}, FinishReason: FinishLength, PromptTokens: 10, CompletionTokens: 3, CachedTokens: 8}},
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			var got GenerateResponse
			if err := got.Unmarshal(want.Marshal()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzUnmarshal feeds every decoder arbitrary bytes: none may panic, and a
// GenerateRequest that decodes survives a round trip.
func FuzzUnmarshal(f *testing.F) {
	n := uint32(3)
	f.Add((&GenerateRequest{RequestID: "r", Text: "t", MaxTokens: &n, Stream: true}).Marshal())
	f.Add((&GenerateRequest{Tokenized: &TokenizedInput{InputIDs: []uint32{1, 2}}}).Marshal())
	f.Add((&GenerateResponse{Complete: &Complete{OutputIDs: []uint32{4}, FinishReason: "stop"}}).Marshal())
	f.Add((&EmbedResponse{Embedding: []float32{0.5}, EmbeddingDim: 1}).Marshal())
	f.Add((&ServerInfo{ActiveRequests: 2, UptimeSeconds: 1.5, ServerType: "vllm-grpc"}).Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		var req GenerateRequest
		if err := req.Unmarshal(b); err == nil {
			var again GenerateRequest
			if err := again.Unmarshal(req.Marshal()); err != nil {
				t.Fatalf("re-decoding %+v: %v", req, err)
			}
			if req.Tokenized != nil && len(req.Tokenized.InputIDs) == 0 && req.Tokenized.OriginalText == "" {
				req.Tokenized = &TokenizedInput{} // an empty message encodes as an empty one
			}
			if diff := cmp.Diff(req, again); diff != "" {
				t.Fatalf("round trip (-first +second):\n%s", diff)
			}
		}
		for _, m := range []interface{ Unmarshal([]byte) error }{
			&GenerateResponse{}, &EmbedRequest{}, &EmbedResponse{}, &HealthCheckResponse{}, &AbortRequest{}, &ModelInfo{}, &ServerInfo{},
		} {
			_ = m.Unmarshal(b)
		}
	})
}
