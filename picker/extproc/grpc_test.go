package extproc

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
)

// grpcFrame puts a gRPC message's 5-byte prefix before msg.
func grpcFrame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// pbField appends a length-delimited field; pbUint a varint one.
func pbField(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func pbUint(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// generateText is a framed GenerateRequest with a text prompt, streamed.
func generateText(text string) []byte {
	b := pbField(nil, 1, []byte("req-1"))
	b = pbField(b, 3, []byte(text))
	b = pbField(b, 4, pbUint(nil, 8, 16)) // sampling_params.max_tokens
	return grpcFrame(pbUint(b, 5, 1))
}

// generateIDs is a framed GenerateRequest with token ids alone.
func generateIDs(ids []uint64) []byte {
	var packed []byte
	for _, id := range ids {
		packed = protowire.AppendVarint(packed, id)
	}
	return grpcFrame(pbField(nil, 2, pbField(nil, 2, packed)))
}

// generateChunk and generateComplete are framed GenerateResponses;
// embedResp a framed EmbedResponse.
func generateChunk(token, prompt, completion uint64) []byte {
	c := pbField(nil, 1, protowire.AppendVarint(nil, token))
	return grpcFrame(pbField(nil, 1, pbUint(pbUint(c, 2, prompt), 3, completion)))
}

func generateComplete(prompt, completion, cached uint64) []byte {
	c := pbField(nil, 2, []byte("stop"))
	return grpcFrame(pbField(nil, 2, pbUint(pbUint(pbUint(c, 3, prompt), 4, completion), 5, cached)))
}

func embedResp(prompt uint64) []byte {
	e := pbField(nil, 1, protowire.AppendFixed32(protowire.AppendFixed32(nil, 1), 2))
	return grpcFrame(pbUint(pbUint(e, 2, prompt), 3, 2))
}

// grpcRequest sends a gRPC call's headers and its one message, as a gRPC
// client sends them: no content-length, the message's DATA ending the
// request.
func (s *session) grpcRequest(path string, msg []byte, extra ...string) {
	kv := append([]string{":method", "POST", ":scheme", "http", ":path", path, ":authority", "gw",
		"content-type", "application/grpc", "te", "trailers"}, extra...)
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...)},
	}})
	s.requestBody(string(msg), true)
}

// grpcResponseHeaders sends a gRPC response's headers; grpcStatus, when
// not "", makes it trailers-only.
func (s *session) grpcResponseHeaders(grpcStatus string) {
	kv := []string{":status", "200", "content-type", "application/grpc"}
	if grpcStatus != "" {
		kv = append(kv, "grpc-status", grpcStatus, "grpc-message", "engine says no")
	}
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: grpcStatus != ""},
	}})
}

func (s *session) grpcTrailers(grpcStatus string) {
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
		ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headerMap("grpc-status", grpcStatus)},
	}})
}

// TestAGRPCGenerateFollowsItsPrefixAsHTTPDoes sends requests that share a
// 2,000-token prefix to the cache-aware policy over four pods, over HTTP
// and over vLLM's gRPC engine API (its text, and its token ids alone):
// each protocol's requests all go to one pod, the prefix's.
func TestAGRPCGenerateFollowsItsPrefixAsHTTPDoes(t *testing.T) {
	shared := strings.Repeat("You are a careful assistant who answers in full. ", 160) // ~8,000 bytes, 2,000 tokens
	ids := make([]uint64, 2000)
	for i := range ids {
		ids[i] = uint64(i*7919%128000 + 1)
	}
	for name, send := range map[string]func(s *session, i int){
		"http completions": func(s *session, i int) {
			body := fmt.Sprintf(`{"model":"m","prompt":%q,"stream":true}`, shared+fmt.Sprintf("question %d?", i))
			s.requestHeaders("/v1/completions", len(body), false, nil)
			s.requestBody(body, true)
		},
		"grpc generate, text": func(s *session, i int) {
			s.grpcRequest(openai.GeneratePath, generateText(shared+fmt.Sprintf("question %d?", i)))
		},
		"grpc generate, token ids": func(s *session, i int) {
			s.grpcRequest(openai.GeneratePath, generateIDs(append(ids[:len(ids):len(ids)], uint64(200000+i), 5, 6)))
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, []string{"127.0.0.1:8000", "127.0.0.2:8000", "127.0.0.3:8000", "127.0.0.4:8000"})
			pol, err := policy.Build(policy.Config{Name: policy.CacheAware}, e.reg)
			if err != nil {
				t.Fatal(err)
			}
			e.server.picker = pol
			dests := map[string]int{}
			for i := range 8 {
				s := e.open()
				send(s, i)
				primary, _, _ := strings.Cut(s.routed(true).dest, ",")
				dests[primary]++
				s.grpcResponseHeaders("0") // trailers-only OK: the request ends
				s.recv()
			}
			if len(dests) != 1 {
				t.Errorf("requests sharing a prefix went to %v, want one pod", dests)
			}
			if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
				t.Errorf("load (%d,%d) after every response ended, want none", p, d)
			}
		})
	}
}
