package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
	"github.com/inferpick/inferpick/cmd/vllm-sim/vllmgrpc"
)

// NewGRPC returns a gRPC server with the VllmEngine service of vLLM's gRPC
// entrypoint, served from the same engines, prefix caches, KV events and
// metrics as the HTTP API. The caller serves it on a listener and stops it.
//
// Generate runs a request on the base model (the protocol names none):
// text or token ids in, the token ids out, in a GenerateStreamChunk per
// engine step that made tokens and a final GenerateComplete when stream is
// set, or a single GenerateComplete when not. The error fault answers with
// the gRPC code Envoy maps its HTTP status to, the stall fault holds the
// stream after as many chunks, and the gRPC error fault ends it with
// INTERNAL after as many; the drop fault does not apply. The standard gRPC
// health service (grpc.health.v1) answers Check: SERVING for the server
// ("") and for vllm.grpc.engine.VllmEngine, NOT_FOUND for any other
// service, as smg-grpc-servicer's VllmHealthServicer answers where a vLLM
// gRPC server registers it. Not every vLLM release does (those that
// register VllmEngine and reflection alone answer UNIMPLEMENTED), so a
// check passing here says nothing of a given release.
func (s *Server) NewGRPC(opts ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append(opts, grpc.ForceServerCodec(vllmgrpc.Codec{}), grpc.UnknownServiceHandler(s.serveRPC))...)
}

// rpcState is the Generate calls in flight, by request id, for Abort.
type rpcState struct {
	mu          sync.Mutex
	runs        map[string]*rpcRun
	lastReceive atomic.Int64 // Unix nanoseconds of the last Generate or Embed
}

// rpcRun is one Generate call's run; aborted says Abort ended it.
type rpcRun struct {
	rn      *run
	aborted atomic.Bool
}

func (r *rpcState) add(id string, rr *rpcRun) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.runs[id]; dup {
		return false
	}
	if r.runs == nil {
		r.runs = map[string]*rpcRun{}
	}
	r.runs[id] = rr
	return true
}

func (r *rpcState) remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.runs, id)
}

func (r *rpcState) abort(ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if rr := r.runs[id]; rr != nil {
			rr.aborted.Store(true)
			rr.rn.abort()
		}
	}
}

// serveRPC answers every method of the service.
func (s *Server) serveRPC(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	var in []byte
	switch method {
	case healthCheckMethod:
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		return healthCheck(stream, in)
	case vllmgrpc.MethodGenerate, vllmgrpc.MethodEmbed, vllmgrpc.MethodHealthCheck,
		vllmgrpc.MethodAbort, vllmgrpc.MethodGetModelInfo, vllmgrpc.MethodGetServerInfo:
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
	default:
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	var out interface{ Marshal() []byte }
	switch method {
	case vllmgrpc.MethodGenerate:
		return s.rpcGenerate(stream, in)
	case vllmgrpc.MethodEmbed:
		resp, err := s.rpcEmbed(in)
		if err != nil {
			return err
		}
		out = resp
	case vllmgrpc.MethodHealthCheck:
		out = &vllmgrpc.HealthCheckResponse{Healthy: true, Message: "OK"}
	case vllmgrpc.MethodAbort:
		var req vllmgrpc.AbortRequest
		if err := req.Unmarshal(in); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		s.rpc.abort(req.RequestIDs)
		return stream.SendMsg([]byte{})
	case vllmgrpc.MethodGetModelInfo:
		out = &vllmgrpc.ModelInfo{
			ModelPath:        s.cfg.Model,
			IsGeneration:     true,
			MaxContextLength: uint32(min(s.maxModelLen(), math.MaxUint32)), //nolint:gosec // clamped
			VocabSize:        math.MaxUint32,                               // any 4 bytes are a token
		}
	case vllmgrpc.MethodGetServerInfo:
		es := s.engineStats()
		info := &vllmgrpc.ServerInfo{
			ActiveRequests: uint32(es.Running + es.Waiting), //nolint:gosec // bounded by the engines' queues
			UptimeSeconds:  time.Since(time.Unix(s.started, 0)).Seconds(),
			ServerType:     "vllm-grpc",
		}
		if t := s.rpc.lastReceive.Load(); t != 0 {
			info.LastReceiveTimestamp = float64(t) / float64(time.Second)
		}
		out = info
	}
	return stream.SendMsg(out.Marshal())
}

// healthCheckMethod is the standard gRPC health service's Check.
const healthCheckMethod = healthpb.Health_Check_FullMethodName

// vllmService is the service name of vLLM's engine API, which the health
// service reports on beside the whole server's "".
const vllmService = "vllm.grpc.engine.VllmEngine"

// healthCheck answers grpc.health.v1.Health/Check.
func healthCheck(stream grpc.ServerStream, in []byte) error {
	var req healthpb.HealthCheckRequest
	if err := proto.Unmarshal(in, &req); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if req.GetService() != "" && req.GetService() != vllmService {
		return status.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
	out, err := proto.Marshal(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return stream.SendMsg(out)
}

// rpcGenerate serves one Generate call.
func (s *Server) rpcGenerate(stream grpc.ServerStream, in []byte) error {
	var req vllmgrpc.GenerateRequest
	if err := req.Unmarshal(in); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	s.rpc.lastReceive.Store(time.Now().UnixNano())
	prompt := req.Text
	if req.Tokenized != nil {
		prompt = tokenText(req.Tokenized.InputIDs)
	}
	if prompt == "" {
		return status.Error(codes.InvalidArgument, "the request has no input: set text or tokenized.input_ids")
	}
	limit := s.cfg.DefaultMaxTokens
	if req.MaxTokens != nil {
		if *req.MaxTokens == 0 {
			return status.Error(codes.InvalidArgument, "sampling_params.max_tokens must be at least 1")
		}
		limit = int(min(*req.MaxTokens, math.MaxInt32))
	}
	fc, failWith := s.cfg.Faults.Roll()
	if failWith != 0 {
		s.injected.Add(1)
		return status.Error(grpcCode(failWith), "simulated failure")
	}
	id := req.RequestID
	if id == "" {
		id = fmt.Sprintf("grpc-%016x", s.ids.Add(1))
	}
	ctx := stream.Context()
	rn, err := s.start(ctx, job{model: s.cfg.Model, prompts: []string{prompt}, maxTokens: min(limit, s.cfg.MaxTokensCap), stream: req.Stream})
	if err != nil {
		if errors.Is(err, engine.ErrStopped) {
			return status.Error(codes.Unavailable, err.Error())
		}
		return status.Error(codes.InvalidArgument, err.Error())
	}
	defer rn.abort()
	rr := &rpcRun{rn: rn}
	if !s.rpc.add(id, rr) {
		return status.Errorf(codes.AlreadyExists, "request %q is already running", id)
	}
	defer s.rpc.remove(id)
	return s.generateStream(ctx, stream, rr, fc)
}

// generateStream sends rr's tokens as they come, then its completion.
func (s *Server) generateStream(ctx context.Context, stream grpc.ServerStream, rr *rpcRun, fc faults.Config) error {
	rn, chunks, last := rr.rn, 0, 0
	for {
		sts, done, aborted := rn.statuses()
		rn.record(s.metrics, sts)
		st := sts[0]
		if rn.stream && st.Generated > rn.sent[0] {
			if err := midStreamFault(ctx, fc, chunks); err != nil {
				return err
			}
			msg := &vllmgrpc.GenerateResponse{Chunk: &vllmgrpc.Chunk{
				TokenIDs:         outputIDs(rn.sent[0], st.Generated),
				PromptTokens:     uint32(st.PromptTokens),           //nolint:gosec // bounded by the KV pool
				CompletionTokens: uint32(st.Generated - rn.sent[0]), //nolint:gosec // as above
				CachedTokens:     uint32(st.CachedTokens),           //nolint:gosec // as above
			}}
			if err := stream.SendMsg(msg.Marshal()); err != nil {
				return err
			}
			last, rn.sent[0], chunks = rn.sent[0], st.Generated, chunks+1
		}
		switch {
		case aborted && rr.aborted.Load():
			return stream.SendMsg(complete(st, rn.stream, last, vllmgrpc.FinishAbort).Marshal())
		case aborted && ctx.Err() != nil:
			return status.FromContextError(ctx.Err()).Err()
		case aborted:
			return status.Error(codes.Unavailable, errStoppedMidway)
		case done:
			if err := midStreamFault(ctx, fc, chunks); err != nil {
				return err
			}
			return stream.SendMsg(complete(st, rn.stream, last, vllmgrpc.FinishLength).Marshal())
		}
		select {
		case <-rn.notify:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// midStreamFault is the fault due once sent chunks have gone out: the
// stall fault holds the stream until the client leaves, the gRPC error
// fault ends it with INTERNAL.
func midStreamFault(ctx context.Context, fc faults.Config, sent int) error {
	if fc.GRPCErrorAfterChunks != faults.Off && sent >= fc.GRPCErrorAfterChunks {
		return status.Errorf(codes.Internal, "simulated failure after %d chunks", sent)
	}
	if fc.StallAfterChunks == faults.Off || sent < fc.StallAfterChunks {
		return nil
	}
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// complete is a call's last message. As vLLM's servicer sends it, a
// streamed call's holds the output of its last chunk again (from token
// last on: each chunk's counts are the chunk's own, and a client adds them
// up), and one not streamed holds the whole output.
func complete(st engine.Status, streamed bool, last int, reason string) *vllmgrpc.GenerateResponse {
	from := 0
	if streamed {
		from = min(last, st.Generated)
	}
	return &vllmgrpc.GenerateResponse{Complete: &vllmgrpc.Complete{
		OutputIDs:        outputIDs(from, st.Generated),
		FinishReason:     reason,
		PromptTokens:     uint32(st.PromptTokens),     //nolint:gosec // bounded by the KV pool
		CompletionTokens: uint32(st.Generated - from), //nolint:gosec // as above
		CachedTokens:     uint32(st.CachedTokens),     //nolint:gosec // as above
	}}
}

// outputIDs are the token ids of output tokens [from, to) of the first
// choice: the words of outputText, each one token.
func outputIDs(from, to int) []uint32 {
	return kvcache.TokenIDs(outputText(0, from, to), nil)
}

// tokenText is the text whose tokens are ids under the simulator's
// tokenizer rule (kvcache.TokenIDs): each id's 4 bytes, little-endian.
func tokenText(ids []uint32) string {
	b := make([]byte, 0, len(ids)*kvcache.BytesPerToken)
	for _, id := range ids {
		b = append(b, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	return string(b)
}

// embeddingDim is the length of the simulator's embeddings.
const embeddingDim = 8

// rpcEmbed answers Embed with a vector that depends on the input alone.
func (s *Server) rpcEmbed(in []byte) (*vllmgrpc.EmbedResponse, error) {
	var req vllmgrpc.EmbedRequest
	if err := req.Unmarshal(in); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.rpc.lastReceive.Store(time.Now().UnixNano())
	ids := req.Tokenized.InputIDs
	if len(ids) == 0 {
		return nil, status.Error(codes.InvalidArgument, "the request has no input: set tokenized.input_ids")
	}
	if len(ids) > s.maxModelLen() {
		return nil, status.Errorf(codes.InvalidArgument, "%d input tokens exceed the model's %d", len(ids), s.maxModelLen())
	}
	vec := make([]float32, embeddingDim)
	h := uint64(14695981039346656037)
	for i, id := range ids {
		h = (h ^ uint64(id)) * 1099511628211
		vec[i%embeddingDim] += float32(h>>40) / float32(1<<24)
	}
	var norm float64
	for _, x := range vec {
		norm += float64(x) * float64(x)
	}
	if norm > 0 {
		for i := range vec {
			vec[i] = float32(float64(vec[i]) / math.Sqrt(norm))
		}
	}
	return &vllmgrpc.EmbedResponse{Embedding: vec, PromptTokens: uint32(len(ids)), EmbeddingDim: embeddingDim}, nil //nolint:gosec // bounded above
}

// grpcCode is the gRPC code Envoy gives an HTTP status
// (Grpc::Utility::httpToGrpcStatus), the code an injected error carries.
func grpcCode(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest:
		return codes.Internal
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codes.Unavailable
	}
	return codes.Unknown
}
