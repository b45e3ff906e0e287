package extproc

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/picker/attrexpr"
	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
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
	s.grpcRequestIn(nil, path, msg, extra...)
}

// grpcRequestIn is grpcRequest on a stream whose first message carries
// the gateway's body modes, pc.
func (s *session) grpcRequestIn(pc *extprocv3.ProtocolConfiguration, path string, msg []byte, extra ...string) {
	kv := append([]string{":method", "POST", ":scheme", "http", ":path", path, ":authority", "gw",
		"content-type", "application/grpc", "te", "trailers"}, extra...)
	s.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...)},
		},
		ProtocolConfig: pc,
	})
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

// grpcStarted sends a gRPC call of msg on path, takes the picker's route
// and passes on the server's response headers, the call begun.
func (s *session) grpcStarted(path string, msg []byte) {
	s.t.Helper()
	s.grpcRequest(path, msg)
	s.routed(true)
	s.grpcResponseHeaders("")
	s.recv()
}

func (s *session) grpcTrailers(grpcStatus string) {
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
		ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headerMap("grpc-status", grpcStatus)},
	}})
}

// grpcRefusal reads a local reply to a gRPC request and checks that it is
// one a gRPC client reads: the gRPC status set, the reason in
// grpc-message and in the body (which Envoy makes the grpc-message).
func (s *session) grpcRefusal() (httpStatus int, code codes.Code, message string) {
	s.t.Helper()
	r := s.recv()
	ir := r.GetImmediateResponse()
	if ir == nil {
		s.t.Fatalf("want an immediate response, got %v", r)
	}
	if ir.GetGrpcStatus() == nil {
		s.t.Fatalf("immediate response without a grpc_status: %v", ir)
	}
	set := map[string]string{}
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	if set["content-type"] != "application/grpc" || set["grpc-message"] == "" || set["grpc-message"] != percentEncode(string(ir.GetBody())) {
		s.t.Fatalf("immediate response headers %v with body %q: want content-type application/grpc and the body as grpc-message", set, ir.GetBody())
	}
	return int(ir.GetStatus().GetCode()), codes.Code(ir.GetGrpcStatus().GetStatus()), string(ir.GetBody())
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

// TestAMalformedGRPCRequestIsAGRPCStatus: a request the engine would not
// read gets INVALID_ARGUMENT with the reason, as a trailers-only gRPC
// answer, a log line, and holds nothing after.
func TestAMalformedGRPCRequestIsAGRPCStatus(t *testing.T) {
	good := generateText("hello")
	compressed := append([]byte{1}, good[1:]...)
	for name, tc := range map[string]struct {
		path   string
		body   []byte
		reason string
	}{
		"truncated":               {openai.GeneratePath, good[:len(good)-2], "the message is"},
		"two messages":            {openai.GeneratePath, append(append([]byte(nil), good...), good...), "a unary request holds one message"},
		"compressed":              {openai.GeneratePath, compressed, "compressed gRPC message"},
		"a JSON body":             {openai.GeneratePath, []byte(`{"prompt":"hi"}`), "invalid gRPC message framing"},
		"bad protobuf":            {openai.GeneratePath, grpcFrame([]byte{0x1a, 40, 'x'}), "invalid protobuf message"},
		"an embed without tokens": {openai.EmbedPath, grpcFrame(pbField(nil, 1, []byte("r"))), "missing input"},
	} {
		t.Run(name, func(t *testing.T) {
			var logs *logRecorder
			e := newEnv(t, twoWorkers, func(o *Options) { logs = recordLogs(o) })
			s := e.open()
			s.grpcRequest(tc.path, tc.body)
			status, code, msg := s.grpcRefusal()
			if status != 400 || code != codes.InvalidArgument || !strings.Contains(msg, tc.reason) {
				t.Errorf("refusal %d %v %q, want 400 InvalidArgument with %q", status, code, msg, tc.reason)
			}
			if _, err := s.stream.Recv(); err == nil {
				t.Error("the stream went on after the refusal")
			}
			eventually(t, "the body's budget given back", func() bool { return e.server.budget.used.Load() == 0 })
			if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
				t.Errorf("load (%d,%d) after a refusal, want none", p, d)
			}
			logged := logs.String()
			if want := `"msg"="Rejected request" "status"=400 "grpcStatus"="InvalidArgument"`; !strings.Contains(logged, want) {
				t.Errorf("log:\n%s\nwant a line with %s", logged, want)
			}
		})
	}
}

// TestAGRPCRequestTheQueueShedsIsUnavailable: flow control's refusal of a
// gRPC request is UNAVAILABLE, the status a gRPC client retries with
// backoff, where an HTTP client gets 429.
func TestAGRPCRequestTheQueueShedsIsUnavailable(t *testing.T) {
	e, q, _ := queueEnv(t, flowcontrol.Options{})
	first := e.open()
	first.grpcRequest(openai.GeneratePath, generateText("first"), ObjectiveHeader, "interactive")
	first.routed(true)

	batch := e.open()
	batch.grpcRequest(openai.GeneratePath, generateText("second"), ObjectiveHeader, "batch")
	status, code, msg := batch.grpcRefusal()
	if status != 429 || code != codes.Unavailable || !strings.Contains(msg, "shed") {
		t.Errorf("batch request under saturation: %d %v %q, want 429 Unavailable shed", status, code, msg)
	}
	if q.Len() != 0 {
		t.Errorf("%d queued, want the shed request not queued", q.Len())
	}
}

// TestAnotherEngineMethodIsRoutedByLoad: HealthCheck, GetModelInfo and the
// like carry no prompt: they go to any pod, and a refusal (here, a subset
// hint that allows none) is a gRPC status.
func TestAnotherEngineMethodIsRoutedByLoad(t *testing.T) {
	e := newEnv(t, twoWorkers)
	s := e.open()
	s.grpcRequest("/vllm.grpc.engine.VllmEngine/HealthCheck", grpcFrame(nil))
	if r := s.routed(true); r.dest == "" {
		t.Fatal("HealthCheck not routed")
	}
	s.grpcResponseHeaders("")
	s.recv()
	s.responseBody(string(grpcFrame(pbUint(nil, 1, 1))), false)
	s.recv()
	s.grpcTrailers("0")
	s.recv()
	if got := e.released(reasonCompleted, reasonError); !cmp.Equal(got, map[string]float64{reasonCompleted: 1}) {
		t.Errorf("releases %v, want one completed", got)
	}

	refused := e.open()
	kv := []string{":method", "POST", ":path", "/vllm.grpc.engine.VllmEngine/GetModelInfo", "content-type", "application/grpc"}
	refused.send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...)}},
		MetadataContext: subsetHint(structpb.NewListValue(&structpb.ListValue{})),
	})
	refused.requestBody(string(grpcFrame(nil)), true)
	if status, code, _ := refused.grpcRefusal(); status != 503 || code != codes.Unavailable {
		t.Errorf("refusal %d %v, want 503 Unavailable", status, code)
	}
}

// TestAGRPCFailureIsInItsStatus: a gRPC response is HTTP 200 whether or
// not the call succeeded; its grpc-status, in the trailers or in the
// headers of a trailers-only response, tells. A failed call counts as the
// model server's failure, not as completed.
func TestAGRPCFailureIsInItsStatus(t *testing.T) {
	for name, tc := range map[string]struct {
		respond func(s *session)
		want    map[string]float64
	}{
		"trailers OK": {
			respond: func(s *session) {
				s.responseBody(string(generateChunk(7, 5, 1)), false)
				s.recv()
				s.grpcTrailers("0")
			},
			want: map[string]float64{reasonCompleted: 1},
		},
		"trailers UNAVAILABLE after a token": {
			respond: func(s *session) {
				s.responseBody(string(generateChunk(7, 5, 1)), false)
				s.recv()
				s.grpcTrailers("14")
			},
			want: map[string]float64{reasonError: 1},
		},
		"trailers-only INTERNAL": {
			respond: func(*session) {},
			want:    map[string]float64{reasonError: 1},
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			s := e.open()
			s.grpcRequest(openai.GeneratePath, generateText("hello"))
			s.routed(true)
			if name == "trailers-only INTERNAL" {
				s.grpcResponseHeaders("13")
			} else {
				s.grpcResponseHeaders("")
			}
			s.recv()
			tc.respond(s)
			if name != "trailers-only INTERNAL" {
				s.recv()
			}
			if got := e.released(reasonCompleted, reasonError, reasonCancelled); !cmp.Equal(got, tc.want) {
				t.Errorf("releases %v, want %v", got, tc.want)
			}
			if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
				t.Errorf("load (%d,%d) after the response, want none", p, d)
			}
		})
	}
}

// TestAGRPCResponseReportsItsUsage: the attribute reporter reads a gRPC
// response's usage from its messages, split across body chunks anywhere,
// and reports it with the trailers that end the call.
func TestAGRPCResponseReportsItsUsage(t *testing.T) {
	// As vLLM streams: each chunk counts the token it carries, and the
	// complete message repeats the last chunk's count.
	var stream string
	for i := range 10 {
		stream += string(generateChunk(uint64(11+i), 32, 1))
	}
	stream += string(generateComplete(32, 1, 16))
	for name, tc := range map[string]struct {
		path, request string
		chunks        []string
		want          map[string]any
	}{
		"generate, streamed in odd chunks": {
			path: openai.GeneratePath, request: string(generateText("hello")),
			chunks: []string{stream[:3], stream[3:17], stream[17:50], stream[50:]},
			want:   map[string]any{"envoy.lb": map[string]any{"x-gateway-inference-request-cost": 10.0, "prompt": 32.0}},
		},
		"embed": {
			path: openai.EmbedPath, request: string(grpcFrame(pbField(nil, 2, pbField(nil, 1, []byte("embed me"))))),
			chunks: []string{string(embedResp(9))},
			want:   map[string]any{"envoy.lb": map[string]any{"prompt": 9.0}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers, func(o *Options) {
				for _, a := range [][4]string{upstreamCost, {"", "prompt", "usage.prompt_tokens", ""}} {
					attr, err := attrexpr.NewAttribute(a[0], a[1], a[2], a[3])
					if err != nil {
						t.Fatal(err)
					}
					o.Attributes = append(o.Attributes, attr)
				}
			})
			s := e.open()
			s.grpcStarted(tc.path, []byte(tc.request))
			for _, c := range tc.chunks {
				s.responseBody(c, false)
				if md := s.recv().GetDynamicMetadata().AsMap(); len(md) != 0 {
					t.Errorf("a body chunk reported %v, want the trailers to", md)
				}
			}
			s.grpcTrailers("0")
			got := s.recv().GetDynamicMetadata().AsMap()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("the trailers' metadata (-want +got):\n%s", diff)
			}
			if n := testutil.ToFloat64(e.server.metrics.releases.WithLabelValues(reasonCompleted)); n != 1 {
				t.Errorf("%v completed releases, want 1", n)
			}
		})
	}
}

// TestAGRPCCallIsInPrefillUntilItsFirstToken: vLLM's gRPC server sends
// its response headers as the call starts, before the engine runs, so the
// call's load stays in prefill, and no time to first token is recorded,
// until a message carries output token ids.
func TestAGRPCCallIsInPrefillUntilItsFirstToken(t *testing.T) {
	e := newEnv(t, twoWorkers)
	s := e.open()
	s.grpcStarted(openai.GeneratePath, generateText("hello"))
	if p, d := totalLoad(e.reg.Workers()...); p != 1 || d != 0 {
		t.Errorf("load (%d,%d) after the response headers alone, want (1,0)", p, d)
	}
	const ttft = "inferpick_time_to_first_token_seconds"
	if got := histCount(t, e, ttft); got != 0 {
		t.Errorf("%d times to first token recorded at the headers, want none", got)
	}
	s.responseBody(string(generateChunk(7, 5, 1)), false)
	s.recv()
	if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 1 {
		t.Errorf("load (%d,%d) after the first chunk with a token, want (0,1)", p, d)
	}
	if got := histCount(t, e, ttft); got != 1 {
		t.Errorf("%d times to first token recorded after the first token, want 1", got)
	}
}

// TestACompressedGRPCResponseMovesTheCallToDecode: a server that
// compresses its responses (grpc-encoding) sends messages the picker
// cannot read; each is output all the same, so the call leaves prefill
// once the first has come whole.
func TestACompressedGRPCResponseMovesTheCallToDecode(t *testing.T) {
	e := newEnv(t, twoWorkers)
	s := e.open()
	s.grpcStarted(openai.GeneratePath, generateText("hello"))
	for i := range 5 {
		msg := generateChunk(uint64(11+i), 5, 1)
		msg[0] = 1 // compressed: the bytes stand for gzip's
		s.responseBody(string(msg), false)
		s.recv()
	}
	if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 1 {
		t.Errorf("load (%d,%d) after 5 compressed messages, want (0,1)", p, d)
	}
	if got := histCount(t, e, "inferpick_time_to_first_token_seconds"); got != 1 {
		t.Errorf("%d times to first token recorded, want 1", got)
	}
	s.grpcTrailers("0")
	s.recv()
	if got := e.released(reasonCompleted, reasonError); !cmp.Equal(got, map[string]float64{reasonCompleted: 1}) {
		t.Errorf("releases %v, want one completed", got)
	}
}

// TestAGRPCCallEndsWithItsTrailers: a Generate call is not over at its
// complete message (with sampling_params.n above 1 the engine sends one
// per sequence, and the call can still fail after one): its load is held
// until its trailers, which tell completed from failed. Where the gateway
// sends no trailers, the body's end, or the stream's when it sends no
// body, ends it.
func TestAGRPCCallEndsWithItsTrailers(t *testing.T) {
	const duplex, none = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_NONE
	for name, tc := range map[string]struct {
		bodyMode extprocfilterv3.ProcessingMode_BodySendMode
		respond  func(t *testing.T, e *env, s *session)
		want     map[string]float64
	}{
		"n=2: two complete messages, then OK": {
			bodyMode: duplex,
			respond: func(t *testing.T, e *env, s *session) {
				for i := range 2 {
					s.responseBody(string(generateComplete(5, 3, 0)), false)
					s.recv()
					wantCallHeld(t, e, fmt.Sprintf("after complete message %d", i+1))
				}
				s.grpcTrailers("0")
				s.recv()
			},
			want: map[string]float64{reasonCompleted: 1},
		},
		"a complete message, then INTERNAL": {
			bodyMode: duplex,
			respond: func(_ *testing.T, _ *env, s *session) {
				s.responseBody(string(generateComplete(5, 3, 0)), false)
				s.recv()
				s.grpcTrailers("13")
				s.recv()
			},
			want: map[string]float64{reasonError: 1},
		},
		"no trailers sent: the body's end": {
			bodyMode: duplex,
			respond: func(t *testing.T, e *env, s *session) {
				s.responseBody(string(generateComplete(5, 3, 0)), false)
				s.recv()
				wantCallHeld(t, e, "after the complete message")
				s.responseBody("", true)
				s.recv()
			},
			want: map[string]float64{reasonCompleted: 1},
		},
		"no body sent: the stream's end": {
			bodyMode: none,
			respond: func(t *testing.T, e *env, s *session) {
				wantCallHeld(t, e, "while the call runs")
				if err := s.stream.CloseSend(); err != nil {
					t.Fatal(err)
				}
				if _, err := s.stream.Recv(); err == nil {
					t.Fatal("the stream went on after the gateway closed it")
				}
			},
			want: map[string]float64{reasonCompleted: 1},
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			s := e.open()
			s.grpcRequestIn(&extprocv3.ProtocolConfiguration{RequestBodyMode: duplex, ResponseBodyMode: tc.bodyMode},
				openai.GeneratePath, generateText("hello"))
			s.routed(true)
			s.grpcResponseHeaders("")
			s.recv()
			tc.respond(t, e, s)
			eventually(t, "the call's load released", func() bool {
				p, d := totalLoad(e.reg.Workers()...)
				return p+d == 0
			})
			if got := e.released(reasonCompleted, reasonError, reasonCancelled); !cmp.Equal(got, tc.want) {
				t.Errorf("releases %v, want %v", got, tc.want)
			}
		})
	}
}

// wantCallHeld wants the load of e's one call still held; when says at
// which point of the call.
func wantCallHeld(t *testing.T, e *env, when string) {
	t.Helper()
	if p, d := totalLoad(e.reg.Workers()...); p+d != 1 {
		t.Errorf("load (%d,%d) %s, want the call's held", p, d, when)
	}
}

// TestAGRPCStatusNoClientCanReadIsAFailure: trailers without a
// grpc-status, or with one that is not a code, end a call a gRPC client
// counts as failed; so does a trailers-only response whose status is
// missing or not a code. Only 0 is OK.
func TestAGRPCStatusNoClientCanReadIsAFailure(t *testing.T) {
	for name, tc := range map[string]struct {
		trailersOnly bool
		status       []string // the grpc-status header, if any
	}{
		"trailers without grpc-status":      {},
		"trailers with grpc-status OK":      {status: []string{"grpc-status", "OK"}},
		"trailers with grpc-status -1":      {status: []string{"grpc-status", "-1"}},
		"trailers-only without grpc-status": {trailersOnly: true},
		"trailers-only with grpc-status x":  {trailersOnly: true, status: []string{"grpc-status", "x"}},
		"trailers-only with grpc-status -2": {trailersOnly: true, status: []string{"grpc-status", "-2"}},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			s := e.open()
			s.grpcRequest(openai.GeneratePath, generateText("hello"))
			s.routed(true)
			kv := []string{":status", "200", "content-type", "application/grpc"}
			if tc.trailersOnly {
				kv = append(kv, tc.status...)
			}
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
				ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: tc.trailersOnly},
			}})
			s.recv()
			if !tc.trailersOnly {
				s.responseBody(string(generateChunk(7, 5, 1)), false)
				s.recv()
				s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
					ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(append([]string{"grpc-message", "?"}, tc.status...)...)},
				}})
				s.recv()
			}
			if got, want := e.released(reasonCompleted, reasonError), map[string]float64{reasonError: 1}; !cmp.Equal(got, want) {
				t.Errorf("releases %v, want %v", got, want)
			}
		})
	}
}

// TestAGRPCMethodIsGRPCByItsContentType: whether a request is gRPC is its
// content-type's to say, as Envoy's router tells: a call with
// application/grpc or application/grpc+proto is routed, while a JSON POST
// or a gRPC-Web call (Envoy's grpc_web filter not ahead of ext_proc) to
// Generate's path is refused as HTTP, 415 as a gRPC server answers it,
// holding no load.
func TestAGRPCMethodIsGRPCByItsContentType(t *testing.T) {
	long := "application/json; " + strings.Repeat("x", 200)
	for contentType, routed := range map[string]bool{
		"application/grpc":       true,
		"application/grpc+proto": true,
		"application/json":       false,
		"application/grpc-web":   false,
		"":                       false,
		long:                     false,
	} {
		name, named := contentType, `content-type "`+contentType+`"`
		switch contentType {
		case "":
			name, named = "none", "no content-type"
		case long:
			name, named = "long", `content-type "`+long[:64]+`..."`
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			s := e.open()
			kv := []string{":method", "POST", ":path", openai.GeneratePath, ":authority", "gw"}
			if contentType != "" {
				kv = append(kv, "content-type", contentType)
			}
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
				RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...)},
			}})
			if routed {
				s.requestBody(string(generateText("hello")), true)
				if r := s.routed(true); r.dest == "" {
					t.Fatal("not routed")
				}
				return
			}
			// The body follows at once, as a gateway streams it; the
			// refusal may already have ended the stream.
			_ = s.stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
				RequestBody: &extprocv3.HttpBody{Body: []byte(`{"prompt":"hello"}`), EndOfStream: true},
			}})
			r := s.recv()
			ir := r.GetImmediateResponse()
			if ir == nil {
				t.Fatalf("want an immediate response, got %v", r)
			}
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				if k, v := h.GetHeader().GetKey(), string(h.GetHeader().GetRawValue()); k == "content-type" && v != "application/json" {
					t.Errorf("refusal's content-type %q, want application/json", v)
				}
			}
			if code := ir.GetStatus().GetCode(); code != 415 || ir.GetGrpcStatus() != nil || !strings.Contains(string(ir.GetBody()), "not gRPC's") {
				t.Errorf("refusal %d, grpc_status %v, body %s; want 415 without a gRPC status", code, ir.GetGrpcStatus(), ir.GetBody())
			}
			var body struct {
				Error struct{ Message string } `json:"error"`
			}
			if err := json.Unmarshal(ir.GetBody(), &body); err != nil || !strings.Contains(body.Error.Message, named) {
				t.Errorf("refusal's message %q (%v), want it to name %s", body.Error.Message, err, named)
			}
			if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
				t.Errorf("load (%d,%d) after a refusal, want none", p, d)
			}
		})
	}
}

// TestAGRPCPoolServingTwoModelsIsLogged: the gRPC engine API names no
// model, so a pool whose pods report two base models serves a gRPC call
// whichever its pod runs: the first gRPC request says so in the log, once
// while the pods' lists stay the same. A pool of one model logs nothing.
func TestAGRPCPoolServingTwoModelsIsLogged(t *testing.T) {
	for name, tc := range map[string]struct {
		models [2]string
		lines  int
	}{
		"two base models": {models: [2]string{"llama", "qwen"}, lines: 1},
		"one base model":  {models: [2]string{"llama", "llama"}, lines: 0},
	} {
		t.Run(name, func(t *testing.T) {
			var logs *logRecorder
			e := newEnv(t, twoWorkers, func(o *Options) { logs = recordLogs(o) })
			for i, w := range e.reg.Workers() {
				w.SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{tc.models[i]}, Complete: true}})
			}
			for range 3 {
				s := e.open()
				s.grpcRequest(openai.GeneratePath, generateText("hello"))
				s.routed(true)
			}
			if n := strings.Count(logs.String(), "more than one base model"); n != tc.lines {
				t.Errorf("%d lines naming more than one base model, want %d:\n%s", n, tc.lines, logs)
			}
		})
	}
}
