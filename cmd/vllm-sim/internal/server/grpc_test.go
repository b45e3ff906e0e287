package server

import (
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
	"github.com/inferpick/inferpick/cmd/vllm-sim/vllmgrpc"
)

// startGRPC serves a simulator's gRPC API on a loopback port beside its
// HTTP API until the test ends; it returns a client and the HTTP base URL.
func startGRPC(t *testing.T, o simOptions) (*vllmgrpc.Client, string) {
	t.Helper()
	srv, url := startServer(t, o)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := srv.NewGRPC()
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		<-served
	})
	return vllmgrpc.NewClient(conn), url
}

// generate runs req and returns its chunks and its completion.
func generate(t *testing.T, c *vllmgrpc.Client, req *vllmgrpc.GenerateRequest) ([]vllmgrpc.Chunk, vllmgrpc.Complete) {
	t.Helper()
	s, err := c.Generate(t.Context(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	var chunks []vllmgrpc.Chunk
	var done *vllmgrpc.Complete
	for {
		r, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("after %d chunks: %v", len(chunks), err)
		}
		switch {
		case done != nil:
			t.Fatalf("%v after the completion", r)
		case r.Chunk != nil:
			chunks = append(chunks, *r.Chunk)
		case r.Complete != nil:
			done = r.Complete
		default:
			t.Fatal("a response with neither chunk nor complete")
		}
	}
	if done == nil {
		t.Fatalf("the stream ended OK after %d chunks without a completion", len(chunks))
	}
	return chunks, *done
}

func maxTokens(n uint32) *uint32 { return &n }

func TestGRPCGenerateStreamsTokensAndCachesPrefixes(t *testing.T) {
	c, _ := startGRPC(t, defaultSim())
	prompt := strings.Repeat("a shared system prompt; ", 8) // 192 bytes: 48 tokens, 12 blocks of 4
	chunks, first := generate(t, c, &vllmgrpc.GenerateRequest{RequestID: "a", Text: prompt, MaxTokens: maxTokens(5), Stream: true})

	// Each chunk counts its own tokens (vLLM's servicer sends deltas for
	// the client to add up), and a streamed call's completion repeats its
	// last chunk.
	var streamed []uint32
	for i, ch := range chunks {
		streamed = append(streamed, ch.TokenIDs...)
		if int(ch.CompletionTokens) != len(ch.TokenIDs) || ch.PromptTokens != 48 {
			t.Errorf("chunk %d: completion_tokens %d prompt_tokens %d, want %d (its own tokens) and 48", i, ch.CompletionTokens, ch.PromptTokens, len(ch.TokenIDs))
		}
	}
	lastChunk := chunks[len(chunks)-1].TokenIDs
	want := vllmgrpc.Complete{OutputIDs: lastChunk, FinishReason: "length", PromptTokens: 48, CompletionTokens: uint32(len(lastChunk))} //nolint:gosec // a handful of tokens
	if diff := cmp.Diff(want, first); diff != "" {
		t.Errorf("first completion (-want +got):\n%s", diff)
	}
	if len(streamed) != 5 {
		t.Errorf("streamed %d tokens, want 5", len(streamed))
	}
	if got, want := kvcache.TokenIDs(outputText(0, 0, 5), nil), streamed; !slices.Equal(got, want) {
		t.Errorf("streamed token ids %v, want the ids of the simulator's output text %v", want, got)
	}

	// The same prompt as token ids, not streamed: one completion, and the
	// prompt's full blocks but the last come from the prefix cache.
	_, second := generate(t, c, &vllmgrpc.GenerateRequest{RequestID: "b",
		Tokenized: &vllmgrpc.TokenizedInput{InputIDs: kvcache.TokenIDs(prompt, nil)}, MaxTokens: maxTokens(3)})
	if second.CachedTokens <= first.CachedTokens || second.CachedTokens < 40 {
		t.Errorf("cached_tokens %d on the repeat, %d the first time; want it to rise to at least 40 of 48", second.CachedTokens, first.CachedTokens)
	}
	if second.CompletionTokens != 3 || len(second.OutputIDs) != 3 {
		t.Errorf("non-streamed completion %+v, want 3 output tokens", second)
	}
}

func TestGRPCRequestsShowInMetrics(t *testing.T) {
	c, url := startGRPC(t, defaultSim())
	for _, id := range []string{"a", "b"} {
		generate(t, c, &vllmgrpc.GenerateRequest{RequestID: id, Text: "count me in the metrics", MaxTokens: maxTokens(4), Stream: id == "a"})
	}
	m, err := scrape(t, url)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"vllm:request_success_total":             2,
		"vllm:prompt_tokens_total":               12,
		"vllm:generation_tokens_total":           8,
		"vllm:time_to_first_token_seconds_count": 2,
		"vllm:e2e_request_latency_seconds_count": 2,
		"vllm:num_requests_running":              0,
	}
	got := map[string]float64{}
	for k := range want {
		got[k] = m[k]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics after two gRPC requests (-want +got):\n%s", diff)
	}
}

func TestGRPCAbortEndsTheRequest(t *testing.T) {
	o := defaultSim()
	o.scale = 1 // 20 ms a token: 1000 tokens take 20 s
	c, url := startGRPC(t, o)
	s, err := c.Generate(t.Context(), &vllmgrpc.GenerateRequest{RequestID: "long", Text: "a long answer", MaxTokens: maxTokens(1000), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); err != nil || r.Chunk == nil {
		t.Fatalf("first response %v, %v; want a chunk", r, err)
	}
	if err := c.Abort(t.Context(), []string{"long", "unknown"}); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	var last *vllmgrpc.GenerateResponse
	for {
		r, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stream after Abort: %v", err)
		}
		last = r
	}
	if last == nil || last.Complete == nil || last.Complete.FinishReason != "abort" || last.Complete.CompletionTokens >= 1000 {
		t.Fatalf("last response %v, want a completion with finish_reason abort before 1000 tokens", last)
	}
	var st Stats
	getJSON(t, url+"/sim/stats", &st)
	if st.Aborted != 1 || st.Running != 0 {
		t.Errorf("stats after Abort: aborted %d running %d, want 1 and 0", st.Aborted, st.Running)
	}
	info, err := c.GetServerInfo(t.Context())
	if err != nil || info.ActiveRequests != 0 {
		t.Errorf("GetServerInfo after Abort: %+v, %v; want no active request", info, err)
	}
}

func TestGRPCErrorsAreStatuses(t *testing.T) {
	tests := map[string]struct {
		faults bool
		req    vllmgrpc.GenerateRequest
		want   codes.Code
	}{
		"no input":          {req: vllmgrpc.GenerateRequest{MaxTokens: maxTokens(1)}, want: codes.InvalidArgument},
		"zero max tokens":   {req: vllmgrpc.GenerateRequest{Text: "hi", MaxTokens: maxTokens(0)}, want: codes.InvalidArgument},
		"too large":         {req: vllmgrpc.GenerateRequest{Text: strings.Repeat("x", 4*4*600)}, want: codes.InvalidArgument},
		"injected 503":      {faults: true, req: vllmgrpc.GenerateRequest{Text: "hi"}, want: codes.Unavailable},
		"stream, injected":  {faults: true, req: vllmgrpc.GenerateRequest{Text: "hi", Stream: true}, want: codes.Unavailable},
		"tokenized, no ids": {req: vllmgrpc.GenerateRequest{Tokenized: &vllmgrpc.TokenizedInput{OriginalText: "hi"}}, want: codes.InvalidArgument},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := defaultSim()
			if tc.faults {
				o.faults.ErrorRate, o.faults.ErrorStatus = 1, 503
			}
			c, _ := startGRPC(t, o)
			s, err := c.Generate(t.Context(), &tc.req)
			if err == nil {
				_, err = s.Recv()
			}
			if got := status.Code(err); got != tc.want {
				t.Errorf("status %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}

func TestGRPCErrorAfterChunksEndsInTrailers(t *testing.T) {
	o := defaultSim()
	o.faults.GRPCErrorAfterChunks = 1
	c, _ := startGRPC(t, o)
	s, err := c.Generate(t.Context(), &vllmgrpc.GenerateRequest{Text: "a long answer", MaxTokens: maxTokens(50), Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0
	for {
		var r *vllmgrpc.GenerateResponse
		if r, err = s.Recv(); err != nil {
			break
		}
		if r.Complete != nil {
			t.Fatalf("a completion after %d chunks, want the call to fail after 1", chunks)
		}
		chunks++
	}
	if chunks != 1 || status.Code(err) != codes.Internal {
		t.Errorf("%d chunks then %v, want 1 chunk then INTERNAL", chunks, err)
	}
}

// TestGRPCStandardHealth asks the standard gRPC health service what a
// gateway's or kubelet's gRPC check asks: SERVING for the server and the
// engine service, NOT_FOUND for another.
func TestGRPCStandardHealth(t *testing.T) {
	srv, _ := startServer(t, defaultSim())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := srv.NewGRPC()
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	h := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", "vllm.grpc.engine.VllmEngine"} {
		r, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q): %v, %v; want SERVING", svc, r.GetStatus(), err)
		}
	}
	if _, err := h.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "/vllm.grpc.engine.VllmEngine/HealthCheck"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check of a method path: %v, want NOT_FOUND", err)
	}
}

func TestGRPCInfoAndEmbed(t *testing.T) {
	c, _ := startGRPC(t, defaultSim())
	ctx := t.Context()
	health, err := c.HealthCheck(ctx)
	if err != nil || !health.Healthy {
		t.Errorf("HealthCheck: %+v, %v; want healthy", health, err)
	}
	model, err := c.GetModelInfo(ctx)
	if err != nil || model.ModelPath != testModel || !model.IsGeneration || model.MaxContextLength != 512*4 {
		t.Errorf("GetModelInfo: %+v, %v; want model_path %q, generation, 2048 tokens of context", model, err, testModel)
	}
	info, err := c.GetServerInfo(ctx)
	if err != nil || info.ServerType != "vllm-grpc" || info.UptimeSeconds <= 0 {
		t.Errorf("GetServerInfo: %+v, %v", info, err)
	}
	emb, err := c.Embed(ctx, &vllmgrpc.EmbedRequest{Tokenized: vllmgrpc.TokenizedInput{InputIDs: []uint32{1, 2, 3}}})
	if err != nil || emb.PromptTokens != 3 || int(emb.EmbeddingDim) != len(emb.Embedding) || len(emb.Embedding) == 0 {
		t.Errorf("Embed: %+v, %v; want 3 prompt tokens and an embedding of embedding_dim floats", emb, err)
	}
	again, _ := c.Embed(ctx, &vllmgrpc.EmbedRequest{Tokenized: vllmgrpc.TokenizedInput{InputIDs: []uint32{1, 2, 3}}})
	if !slices.Equal(emb.Embedding, again.Embedding) {
		t.Errorf("the same input embedded as %v then %v", emb.Embedding, again.Embedding)
	}
	var unknown []byte
	err = c.Conn().Invoke(ctx, "/vllm.grpc.engine.VllmEngine/Tokenize", []byte{}, &unknown, grpc.ForceCodec(vllmgrpc.Codec{}))
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown method: %v, want Unimplemented", err)
	}
}
