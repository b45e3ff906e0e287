package reliability

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inferpick/inferpick/cmd/vllm-sim/vllmgrpc"
	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// grpcPool is a pool of vllm-sim pods serving vLLM's gRPC engine API: the
// pool's appProtocol is kubernetes.io/h2c and its target port the pods'
// gRPC port, their metrics on the HTTP port (--model-server-metrics-port).
type grpcPool struct {
	p    *picker
	g    *gw
	c    *vllmgrpc.Client
	sims map[string]*sim // by gRPC address, the pool's endpoint
}

// costKey is the envoy.lb attribute the pool's picker reports: a call's
// completion tokens.
const costKey = "x-gateway-inference-request-cost"

func startGRPCPool(t *testing.T, hosts []string) *grpcPool {
	t.Helper()
	return startGRPCPoolMetrics(t, hosts, true)
}

// startGRPCPoolMetrics starts a gRPC pool whose picker reads the pods'
// metrics on their HTTP port when metrics is set; else it has only the
// gRPC port to read, as with vLLM's gRPC server, which serves no HTTP.
func startGRPCPoolMetrics(t *testing.T, hosts []string, metrics bool) *grpcPool {
	t.Helper()
	c := sharedCluster(t)
	ns := c.Namespace(t)
	httpPort, grpcPort := framework.FreePortT(t, hosts...), framework.FreePortT(t, hosts...)
	gp := &grpcPool{sims: map[string]*sim{}}
	for _, h := range hosts {
		s := startSim(t, h, httpPort, "--grpc-port", strconv.Itoa(grpcPort))
		gp.sims[s.GRPCAddr] = s
	}
	if err := c.Client.Create(t.Context(), framework.MakePool(ns, "pool").Ports(int32(grpcPort)).H2C().Obj()); err != nil {
		t.Fatal(err)
	}
	for i, h := range hosts {
		c.ReadyPod(t, framework.MakePod(ns, fmt.Sprintf("vllm-%d", i)).Obj(), h)
	}
	args := []string{"--config-text", "attributes:\n- name: " + costKey + "\n  expression: usage.completion_tokens\n"}
	if metrics {
		args = append(args, "--model-server-metrics-port", strconv.Itoa(httpPort))
	}
	gp.p = startClusterPicker(t, c, ns, "pool", args...)
	gp.p.WaitWorkers(t, len(hosts))
	gp.g = startGateway(t, gp.p.Addr(), gateway.WithAppProtocol(gateway.AppProtocolH2C))
	gp.c = framework.DialGRPC(t, gp.g.Addr)
	return gp
}

// TestGRPCPoolThroughTheGateway routes streamed Generate calls with shared
// long prefixes through the gateway to an h2c pool: every call ends OK,
// each prefix stays on one pod whose cache then holds it, a malformed
// call is refused as INVALID_ARGUMENT, a call that fails in its trailers
// after its first tokens reaches the client with its status, a pod killed
// mid-stream fails its call, and every count the picker took is released,
// the one of the call failed in its trailers as an error.
func TestGRPCPoolThroughTheGateway(t *testing.T) {
	gp := startGRPCPool(t, framework.Loopback(150, 4))
	sampler := sampleLoads(gp.p)

	// Four prefixes, six calls each, the prefixes taking turns.
	const prefixes, calls = 4, 6
	served := make([]map[string]int, prefixes) // endpoint → calls, by prefix
	var cached, prompt uint32
	for j := range calls {
		for i := range prefixes {
			prefix := strings.Repeat(fmt.Sprintf("system prompt %d of the gRPC reliability test, long and shared. ", i), 30)
			req := framework.GenerateRequest(fmt.Sprintf("p%d-c%d", i, j), prefix+fmt.Sprintf("question %d?", j), 16, true)
			r := framework.Generate(t.Context(), gp.c, req)
			if r.Code != codes.OK || r.Complete == nil || len(r.Tokens) != 16 || r.Chunks == 0 {
				t.Errorf("prefix %d call %d: %v %q, %d tokens in %d chunks, completion %v; want OK with 16 streamed tokens and a completion",
					i, j, r.Code, r.Message, len(r.Tokens), r.Chunks, r.Complete)
				continue
			}
			if j > 0 {
				cached += r.Complete.CachedTokens
				prompt += r.Complete.PromptTokens
			}
			recs := gp.g.WaitRecords(t, j*prefixes+i+1)
			rec := recs[len(recs)-1]
			if rec.GRPCStatus != "0" {
				t.Errorf("prefix %d call %d: the gateway saw grpc-status %q, want 0", i, j, rec.GRPCStatus)
			}
			// The usage comes with the call's last message and is reported
			// on the reply to its trailers.
			if got, want := rec.DynamicMetadata[costKey], float64(len(r.Tokens)); got != want {
				t.Errorf("prefix %d call %d: envoy.lb %s = %v at the gateway, want the call's %v completion tokens", i, j, costKey, got, want)
			}
			if served[i] == nil {
				served[i] = map[string]int{}
			}
			served[i][rec.Served]++
		}
	}
	for i, eps := range served {
		if len(eps) != 1 {
			t.Errorf("prefix %d served by %v, want one pod", i, eps)
		}
	}
	// Each call after a prefix's first finds that prefix cached on the pod
	// it lands on: all of the prompt but the question.
	hitRate := float64(cached) / float64(max(prompt, 1))
	t.Logf("prefix cache hit rate of the repeated calls: %.3f (%d of %d prompt tokens); pods by prefix %v", hitRate, cached, prompt, served)
	if hitRate < 0.9 {
		t.Errorf("prefix cache hit rate %.3f, want at least 0.9: calls of one prefix did not find it cached", hitRate)
	}

	// A message that is not valid protobuf is refused before routing.
	if code, msg := malformedGenerate(t.Context(), gp.c); code != codes.InvalidArgument {
		t.Errorf("malformed Generate: %v %q, want INVALID_ARGUMENT", code, msg)
	}

	// A call whose pod fails it in its trailers, after tokens and HTTP 200,
	// ends with that status at the client.
	failInTrailers(t, gp)

	// A pod killed in the middle of a stream ends its call with an error,
	// and the picker's count for it is released.
	killMidStream(t, gp)

	gp.p.WaitIdle(t, 30*time.Second)
	sampler.Stop(t)
	rel := checkReleases(t, gp.p)
	if rel["completed"] != prefixes*calls {
		t.Errorf("%v guards released as completed, want the %d calls that ended OK", rel["completed"], prefixes*calls)
	}
	pp, err := gp.p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	// Every call that streamed a token had its first token seen, once.
	if n := pp.Sum("inferpick_time_to_first_token_seconds"); n != prefixes*calls+2 {
		t.Errorf("%v first tokens observed, want %d (the calls that streamed tokens)", n, prefixes*calls+2)
	}
}

// TestGRPCPoolWithoutMetrics routes a gRPC pool whose pods serve no
// metrics page the picker can read (vLLM's gRPC server serves gRPC alone):
// every scrape fails, yet every call is routed, each prefix stays on one
// pod, and the picker's scrape errors say why.
func TestGRPCPoolWithoutMetrics(t *testing.T) {
	gp := startGRPCPoolMetrics(t, framework.Loopback(154, 3), false)
	const prefixes, calls = 3, 4
	served := make([]map[string]int, prefixes)
	for j := range calls {
		for i := range prefixes {
			prefix := strings.Repeat(fmt.Sprintf("system prompt %d of a pool without metrics, long and shared. ", i), 30)
			r := framework.Generate(t.Context(), gp.c, framework.GenerateRequest(fmt.Sprintf("p%d-c%d", i, j), prefix+fmt.Sprintf("question %d?", j), 8, true))
			if r.Code != codes.OK || r.Complete == nil {
				t.Errorf("prefix %d call %d: %v %q, want OK", i, j, r.Code, r.Message)
				continue
			}
			recs := gp.g.WaitRecords(t, j*prefixes+i+1)
			if served[i] == nil {
				served[i] = map[string]int{}
			}
			served[i][recs[len(recs)-1].Served]++
		}
	}
	for i, eps := range served {
		if len(eps) != 1 {
			t.Errorf("prefix %d served by %v, want one pod: without metrics the prefix index still routes", i, eps)
		}
	}
	gp.p.WaitIdle(t, 30*time.Second)
	checkReleases(t, gp.p)
	pp, err := gp.p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for s := range gp.sims {
		if n := pp.Sum("inferpick_scrape_errors_total", "address", s); n == 0 {
			t.Errorf("no scrape errors counted for %s, whose gRPC port serves no metrics page", s)
		}
	}
}

// malformedGenerate sends a Generate whose message is cut short and
// returns the call's status.
func malformedGenerate(ctx context.Context, c *vllmgrpc.Client) (codes.Code, string) {
	ctx, cancel := context.WithTimeout(ctx, framework.Timeout)
	defer cancel()
	s, err := c.Conn().NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, vllmgrpc.MethodGenerate, grpc.ForceCodec(vllmgrpc.Codec{}))
	if err == nil {
		// Field 1 (request_id) announces 16 bytes and has 2.
		err = s.SendMsg([]byte{0x0a, 0x10, 'a', 'b'})
	}
	if err == nil {
		err = s.CloseSend()
	}
	if err == nil {
		var b []byte
		for err == nil {
			err = s.RecvMsg(&b)
		}
	}
	st := status.Convert(err)
	return st.Code(), st.Message()
}

// failInTrailers makes every pod fail a streamed Generate after its first
// chunk, with INTERNAL in the trailers of an HTTP 200 response, and checks
// that one call streams its chunk and ends with that status at the client
// and at the gateway, and that the picker releases its count as an error.
func failInTrailers(t *testing.T, gp *grpcPool) {
	t.Helper()
	errorsBefore := releasedAs(t, gp.p, "error")
	for _, s := range gp.sims {
		s.SetFaults(t, map[string]any{"grpc_error_after_chunks": 1})
	}
	before := len(gp.g.Records())
	r := framework.Generate(t.Context(), gp.c, framework.GenerateRequest("fails-late", "an answer that breaks off", 16, true))
	if r.Code != codes.Internal || r.Chunks != 1 || r.Complete != nil {
		t.Errorf("call failed in its trailers: %v %q after %d chunks, completion %v; want INTERNAL after 1 chunk", r.Code, r.Message, r.Chunks, r.Complete)
	}
	recs := gp.g.WaitRecords(t, before+1)
	if rec := recs[len(recs)-1]; rec.Status != 200 || rec.GRPCStatus != strconv.Itoa(int(codes.Internal)) {
		t.Errorf("call failed in its trailers: the gateway saw HTTP %d grpc-status %q, want 200 and %d", rec.Status, rec.GRPCStatus, codes.Internal)
	}
	for _, s := range gp.sims {
		s.SetFaults(t, map[string]any{"grpc_error_after_chunks": -1})
	}
	gp.p.WaitIdle(t, 30*time.Second)
	if n := releasedAs(t, gp.p, "error") - errorsBefore; n != 1 {
		t.Errorf("the call failed in its trailers released %v guards as errors, want 1", n)
	}
}

// releasedAs is the number of guards p released for reason.
func releasedAs(t *testing.T, p *picker, reason string) float64 {
	t.Helper()
	pp, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	return releases(pp)[reason]
}

// killMidStream starts a long streamed call, kills the pod serving it once
// its first tokens came, and checks the call fails and the picker's count
// of that pod is released.
func killMidStream(t *testing.T, gp *grpcPool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), framework.LongTimeout)
	defer cancel()
	s, err := gp.c.Generate(ctx, framework.GenerateRequest("victim", "a long answer from a pod about to die", 4000, true))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Recv(); err != nil || r.Chunk == nil {
		t.Fatalf("first response of the long call: %v, %v; want a chunk", r, err)
	}
	var victim *sim
	v, err := gp.p.Workers()
	if err != nil {
		t.Fatal(err)
	}
	for i := range v.Workers {
		if v.Workers[i].Load > 0 {
			victim = gp.sims[v.Workers[i].Address]
		}
	}
	if victim == nil {
		t.Fatalf("no worker holds the long call: %+v", v.Workers)
	}
	victim.Kill()
	for err == nil {
		_, err = s.Recv()
	}
	if st := status.Convert(err); st.Code() == codes.OK {
		t.Errorf("the call on the killed pod ended OK, want an error")
	} else {
		t.Logf("the call on the killed pod ended %v %q", st.Code(), st.Message())
	}
	eventually(t, 30*time.Second, func() error {
		w, err := gp.p.Worker(victim.GRPCAddr)
		if err != nil {
			return err
		}
		if w.Load != 0 || w.Prefill != 0 || w.Decode != 0 {
			return fmt.Errorf("killed pod %s: load %d prefill %d decode %d, want 0", w.Address, w.Load, w.Prefill, w.Decode)
		}
		return nil
	})
}
