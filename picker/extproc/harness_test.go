package extproc

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// inOrder picks candidates in the order given, or fails with err.
type inOrder struct {
	err   error
	panic bool
	seen  func(*policy.Request) // when set, sees each request picked for
	// knows, when set, answers Knows (whether the policy's index knows a
	// prompt); every prompt is known otherwise.
	knows func(*policy.Request) bool

	// observed, when set, records the workers Observe is told served a
	// request.
	observed *observations
	// predicts makes it say it predicts latencies (latencyLearner), so
	// that the server acts on latency objectives; it learns nothing.
	predicts bool
}

// Predicts reports whether the picker is to be taken for one that
// predicts latencies.
func (p *inOrder) Predicts() bool { return p.predicts }

// WholeResponse is false: the time to first token is a first token's.
func (p *inOrder) WholeResponse() bool { return false }

// ObserveTTFT learns nothing.
func (p *inOrder) ObserveTTFT(*policy.Prediction, time.Duration) {}

// ObserveTPOT learns nothing.
func (p *inOrder) ObserveTPOT(*policy.Prediction, time.Duration) {}

type observations struct {
	mu      sync.Mutex
	workers []string
}

// Knows reports whether the policy knows the prompt (Options.Locator).
func (p *inOrder) Knows(req *policy.Request) bool { return p.knows == nil || p.knows(req) }

// Observe records the worker when asked to.
func (p *inOrder) Observe(_ *policy.Request, w *registry.Worker) {
	if o := p.observed; o != nil {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.workers = append(o.workers, w.Address())
	}
}

func (o *observations) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.workers)
}

func (p *inOrder) Pick(req *policy.Request, cands []*registry.Worker, n int) ([]*registry.Worker, error) {
	if p.seen != nil {
		p.seen(req)
	}
	if p.panic {
		panic("policy exploded")
	}
	if p.err != nil {
		return nil, p.err
	}
	return cands[:min(n, len(cands))], nil
}

type env struct {
	t       *testing.T
	reg     *registry.Registry
	picker  *inOrder
	server  *Server
	client  extprocv3.ExternalProcessorClient
	metrics *prometheus.Registry
}

type envOption func(*Options)

// newEnv serves an ext_proc server over loopback gRPC with workers at the
// given addresses.
func newEnv(t *testing.T, addrs []string, opts ...envOption) *env {
	t.Helper()
	reg := registry.New()
	eps := make([]registry.Endpoint, 0, len(addrs))
	for i, a := range addrs {
		ap := netip.MustParseAddrPort(a)
		eps = append(eps, registry.Endpoint{Key: registry.Key{UID: fmt.Sprintf("uid-%d", i), Port: int32(ap.Port())}, Name: fmt.Sprintf("pod-%d", i), Address: ap})
	}
	reg.Replace(eps)
	reg.MarkSynced()
	e := &env{t: t, reg: reg, picker: &inOrder{}, metrics: prometheus.NewRegistry()}
	o := Options{Fallbacks: 1, Registerer: e.metrics}
	for _, f := range opts {
		f(&o)
	}
	e.server = New(reg, e.picker, o)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, e.server, lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	e.client = extprocv3.NewExternalProcessorClient(conn)
	return e
}

func (e *env) worker(addr string) *registry.Worker {
	for _, w := range e.reg.Workers() {
		if w.Address() == addr {
			return w
		}
	}
	e.t.Fatalf("no worker %s", addr)
	return nil
}

// totalLoad sums prefill and decode over the given workers.
func totalLoad(ws ...*registry.Worker) (prefill, decode int64) {
	for _, w := range ws {
		p, d := w.Load()
		prefill += p
		decode += d
	}
	return prefill, decode
}

// eventually polls cond until it holds or the deadline passes. The bound
// only ends a test that fails: it is wide, since a shared machine
// under load can take seconds over what a quiet one does in milliseconds (a
// gateway's flood filling socket buffers under the race detector).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// session is one gateway-side ext_proc stream.
type session struct {
	t      *testing.T
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
}

func (e *env) open() *session {
	ctx, cancel := context.WithCancel(e.t.Context())
	st, err := e.client.Process(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cancel)
	return &session{t: e.t, stream: st, cancel: cancel}
}

func headerMap(kv ...string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return hm
}

func (s *session) send(r *extprocv3.ProcessingRequest) {
	s.t.Helper()
	if err := s.stream.Send(r); err != nil {
		s.t.Fatalf("send: %v", err)
	}
}

// requestHeaders sends the request headers; extra are more header pairs.
func (s *session) requestHeaders(path string, bodyLen int, eos bool, md *corev3.Metadata, extra ...string) {
	kv := append([]string{":method", "POST", ":path", path, ":authority", "gw", "content-type", "application/json"}, extra...)
	if bodyLen >= 0 {
		kv = append(kv, "content-length", fmt.Sprint(bodyLen))
	}
	s.send(&extprocv3.ProcessingRequest{
		Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: eos}},
		MetadataContext: md,
	})
}

// requestHeadersInModes sends a chat request's headers carrying the
// gateway's body modes, as Envoy's first message on a stream does.
func (s *session) requestHeadersInModes(req, resp extprocfilterv3.ProcessingMode_BodySendMode) {
	s.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":method", "POST", ":path", "/v1/chat/completions", "content-type", "application/json")}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: req, ResponseBodyMode: resp},
	})
}

func (s *session) requestBody(chunk string, eos bool) {
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(chunk), EndOfStream: eos},
	}})
}

func (s *session) responseHeaders(status int, contentType string, eos bool, served string) {
	var md *corev3.Metadata
	if served != "" {
		md = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			lbNamespace: {Fields: map[string]*structpb.Value{ServedHeader: structpb.NewStringValue(served)}},
		}}
	}
	s.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":status", fmt.Sprint(status), "content-type", contentType), EndOfStream: eos,
		}},
		MetadataContext: md,
	})
}

func (s *session) responseBody(chunk string, eos bool) {
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(chunk), EndOfStream: eos},
	}})
}

func (s *session) recv() *extprocv3.ProcessingResponse {
	s.t.Helper()
	r, err := s.stream.Recv()
	if err != nil {
		s.t.Fatalf("recv: %v", err)
	}
	return r
}

// routed reads the request-headers reply and the streamed body that follows,
// and returns the destination, the header mutation and the body returned.
type routedReply struct {
	dest     string
	metaDest string
	set      map[string]string
	removed  []string
	clear    bool
	body     []byte
	chunks   int
}

func (s *session) routed(hasBody bool) routedReply {
	s.t.Helper()
	r := s.recv()
	hr := r.GetRequestHeaders()
	if hr == nil {
		s.t.Fatalf("want a request headers reply, got %v", r)
	}
	out := routedReply{set: map[string]string{}, clear: hr.GetResponse().GetClearRouteCache()}
	for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
		out.set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	out.removed = hr.GetResponse().GetHeaderMutation().GetRemoveHeaders()
	out.dest = out.set[DestinationHeader]
	out.metaDest = r.GetDynamicMetadata().GetFields()[lbNamespace].GetStructValue().GetFields()[DestinationHeader].GetStringValue()
	for hasBody {
		b := s.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if b == nil {
			s.t.Fatal("want a streamed request body")
		}
		if len(b.GetBody()) > maxChunk {
			s.t.Fatalf("chunk of %d bytes is over %d", len(b.GetBody()), maxChunk)
		}
		out.body = append(out.body, b.GetBody()...)
		out.chunks++
		if b.GetEndOfStream() {
			break
		}
	}
	return out
}

// immediateReply reads a local reply.
func (s *session) immediateReply() (int, string) {
	s.t.Helper()
	r := s.recv()
	ir := r.GetImmediateResponse()
	if ir == nil {
		s.t.Fatalf("want an immediate response, got %v", r)
	}
	return int(ir.GetStatus().GetCode()), string(ir.GetBody())
}

func chatBody(model, text string) string {
	return fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":%q}]}`, model, text)
}

func sse(content string) string {
	return fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", content)
}

const sseDone = "data: [DONE]\n\n"

func subsetHint(v *structpb.Value) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		subsetNamespace: {Fields: map[string]*structpb.Value{SubsetKey: v}},
	}}
}

func reqHeaders(path string, bodyLen int) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":method", "POST", ":path", path, "content-length", fmt.Sprint(bodyLen)),
	}}}
}

func reqBody(chunk string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(chunk), EndOfStream: eos},
	}}
}

func respHeaders(status int) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":status", fmt.Sprint(status), "content-type", "text/event-stream"),
	}}}
}

func respBody(chunk string, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte(chunk), EndOfStream: eos},
	}}
}

// sendRecv sends one message and reads its reply, without failing the test
// (for use from goroutines).
func sendRecv(s *session, r *extprocv3.ProcessingRequest) error {
	if err := s.stream.Send(r); err != nil {
		return err
	}
	_, err := s.stream.Recv()
	return err
}

// transportEnv names the transport the package's tests serve over: the
// direct server unless it says "grpc". TestMain runs the tests over each.
const transportEnv = "INFERPICK_EXTPROC_TEST_TRANSPORT"

// serve serves srv on lis over the tests' transport until the test ends.
func serve(t testing.TB, srv *Server, lis net.Listener) {
	if os.Getenv(transportEnv) == "grpc" {
		gs := grpc.NewServer(ServerOptions()...)
		extprocv3.RegisterExternalProcessorServer(gs, srv)
		go func() { _ = gs.Serve(lis) }()
		t.Cleanup(gs.Stop)
		return
	}
	ds := NewDirect(srv, DirectOptions{})
	go func() { _ = ds.Serve(lis) }()
	t.Cleanup(ds.Stop)
}

// logRecorder keeps the lines a picker logs for a test to read.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

// recordLogs sets o's logger to one that writes into the returned recorder.
func recordLogs(o *Options) *logRecorder {
	r := &logRecorder{}
	o.Log = funcr.New(func(_, args string) {
		r.mu.Lock()
		r.lines = append(r.lines, args)
		r.mu.Unlock()
	}, funcr.Options{})
	return r
}

// Lines is a copy of the lines logged so far.
func (r *logRecorder) Lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// String is the lines logged so far, one a line.
func (r *logRecorder) String() string {
	return strings.Join(r.Lines(), "\n")
}
