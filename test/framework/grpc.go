package framework

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/inferpick/inferpick/cmd/vllm-sim/vllmgrpc"
)

// DialGRPC returns a VllmEngine client of addr (ip:port: a Sim's GRPCAddr,
// or a Gateway's Addr) over HTTP/2 cleartext; the test's cleanup closes
// its connection.
func DialGRPC(t testing.TB, addr string) *vllmgrpc.Client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return vllmgrpc.NewClient(conn)
}

// GenerateRequest builds a Generate request for text with max tokens,
// streamed or not; id names it for Abort ("" lets the server name it).
func GenerateRequest(id, text string, maxTokens int, stream bool) *vllmgrpc.GenerateRequest {
	n := uint32(max(maxTokens, 0)) //nolint:gosec // clamped
	return &vllmgrpc.GenerateRequest{RequestID: id, Text: text, MaxTokens: &n, Stream: stream}
}

// GRPCResult is what a client saw of one Generate call.
type GRPCResult struct {
	// TTFT runs from the call to the first response carrying tokens (zero
	// when none did).
	TTFT time.Duration
	// Duration runs from the call to its end.
	Duration time.Duration
	// Tokens are the output token ids in order: the chunks' when the call
	// streamed, else the completion's.
	Tokens []uint32
	// Chunks counts the GenerateStreamChunk messages.
	Chunks int
	// Complete is the final GenerateComplete, nil when none came.
	Complete *vllmgrpc.Complete
	// CachedTokens is the completion's cached_tokens (the last chunk's
	// without a completion): the prompt tokens the prefix cache held.
	CachedTokens int
	// Code and Message are the call's final status (codes.OK when it ended
	// well).
	Code    codes.Code
	Message string
	// Header and Trailer are the response's metadata.
	Header, Trailer metadata.MD
}

// Generate sends req over c and reads its responses to the end of the
// call. A failed call is not an error: its status is in the result.
func Generate(ctx context.Context, c *vllmgrpc.Client, req *vllmgrpc.GenerateRequest) GRPCResult {
	var res GRPCResult
	start := time.Now()
	defer func() { res.Duration = time.Since(start) }()
	s, err := c.Generate(ctx, req, grpc.Header(&res.Header), grpc.Trailer(&res.Trailer))
	for err == nil {
		var r *vllmgrpc.GenerateResponse
		if r, err = s.Recv(); err != nil {
			break
		}
		switch {
		case r.Chunk != nil:
			res.Chunks++
			res.Tokens = append(res.Tokens, r.Chunk.TokenIDs...)
			res.CachedTokens = int(r.Chunk.CachedTokens)
			if res.TTFT == 0 && len(r.Chunk.TokenIDs) > 0 {
				res.TTFT = time.Since(start)
			}
		case r.Complete != nil:
			res.Complete = r.Complete
			res.CachedTokens = int(r.Complete.CachedTokens)
			if res.Chunks == 0 {
				res.Tokens = r.Complete.OutputIDs
			}
			if res.TTFT == 0 && len(r.Complete.OutputIDs) > 0 {
				res.TTFT = time.Since(start)
			}
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	st := status.Convert(err)
	res.Code, res.Message = st.Code(), st.Message()
	return res
}
