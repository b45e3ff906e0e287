package extproc

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/picker/attrexpr"
	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/rewrite"
)

// chanStream is an in-memory ext_proc stream: Recv reads what the driver
// hands over, Send drops replies, and the stream's context is cancelled as
// the gateway cancels a stream whose client went away. The handler asking
// for the next message acknowledges the previous one, so the driver steps
// the streams one message at a time and a fuzz input always plays the same
// way.
type chanStream struct {
	grpc.ServerStream
	ctx     context.Context
	in      chan *extprocv3.ProcessingRequest
	ack     chan struct{}
	pending bool
}

func (m *chanStream) Context() context.Context { return m.ctx }

func (m *chanStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if m.pending {
		m.pending = false
		m.ack <- struct{}{}
	}
	select {
	case r, ok := <-m.in:
		if !ok {
			return nil, io.EOF
		}
		m.pending = true
		return r, nil
	case <-m.ctx.Done():
		return nil, status.FromContextError(m.ctx.Err()).Err()
	}
}

// RecvMsg is Recv through the wire: the message is marshalled and decoded
// into dst by the server's codec, as over gRPC.
func (m *chanStream) RecvMsg(dst any) error {
	r, err := m.Recv()
	if err != nil {
		return err
	}
	b, err := proto.Marshal(r)
	if err != nil {
		return err
	}
	return newCodec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, dst)
}

func (m *chanStream) Send(*extprocv3.ProcessingResponse) error {
	if err := m.ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return nil
}

// peer is one stream of the fuzz driver and the Process call serving it.
type peer struct {
	st     *chanStream
	cancel context.CancelFunc
	done   chan struct{}
	closed bool
}

// deliver hands r to the handler and waits until it has been handled.
func (p *peer) deliver(r *extprocv3.ProcessingRequest) {
	if p.closed {
		return
	}
	select {
	case p.st.in <- r:
	case <-p.done:
		return
	}
	select {
	case <-p.st.ack:
	case <-p.done:
	}
}

// end closes the stream from the gateway's side and waits for the handler.
func (p *peer) end() {
	if !p.closed {
		p.closed = true
		close(p.st.in)
	}
	<-p.done
}

// abort cancels the stream and waits for the handler.
func (p *peer) abort() {
	p.cancel()
	<-p.done
	p.closed = true
}

// fuzzWorld is a server with three workers and the real cache-aware policy,
// its session affinity on tokens, or on session ids when ids is set. With
// split, prefill and decode are split: the first pod serves both, the
// second decodes (no label), the third prefills, and a prompt of 8 tokens
// not cached is prefilled apart.
type fuzzWorld struct {
	reg     *registry.Registry
	srv     *Server
	eps     []registry.Endpoint
	removed bool
	prom    *prometheus.Registry
}

func newFuzzWorld(t testing.TB, ids, split bool) *fuzzWorld {
	w := &fuzzWorld{reg: registry.New()}
	var disagg *policy.DisaggregationConfig
	roles := []string{"", "", ""}
	if split {
		disagg, roles = &policy.DisaggregationConfig{MinUncachedTokens: 8}, []string{"both", "", "prefill"}
	}
	for i := range 3 {
		ap := netip.MustParseAddrPort(fmt.Sprintf("10.0.0.%d:8000", i+1))
		w.eps = append(w.eps, registry.Endpoint{Key: registry.Key{UID: fmt.Sprintf("uid-%d", i), Port: 8000}, Name: fmt.Sprintf("pod-%d", i), Address: ap,
			Role: registry.ParseRole(roles[i], roles[i] != "")})
	}
	w.reg.Replace(w.eps)
	w.reg.MarkSynced()
	sa, header := &policy.SessionAffinityConfig{}, sessionHeader
	if ids {
		sa, header = &policy.SessionAffinityConfig{Key: policy.SessionID, Header: idHeader}, idHeader
	}
	pol, err := policy.Build(policy.Config{MaxInFlight: 4, SessionAffinity: sa, Disaggregation: disagg}, w.reg, policy.WithRand(rand.New(rand.NewPCG(1, 2))))
	if err != nil {
		t.Fatal(err)
	}
	w.prom = prometheus.NewRegistry()
	// Requests for "m" are rewritten to one of two targets.
	rw := rewrite.NewTable()
	rw.Set("canary", rewrite.Object{Rules: []rewrite.Rule{{Models: []string{"m"}, Targets: []rewrite.Target{{Model: "m-v1", Weight: 3}, {Model: "m-v2", Weight: 1}}}}})
	// Each response reports its completion tokens, and a ratio that
	// fails on a response with no prompt tokens.
	var attrs []attrexpr.Attribute
	for _, a := range [][2]string{
		{"usage.completion_tokens", "has(usage.completion_tokens)"},
		{"usage.total_tokens > 0.0 ? usage.prompt_tokens / usage.completion_tokens : 1 / 0", ""},
	} {
		attr, err := attrexpr.NewAttribute("", "a"+strconv.Itoa(len(attrs)), a[0], a[1])
		if err != nil {
			t.Fatal(err)
		}
		attrs = append(attrs, attr)
	}
	w.srv = New(w.reg, pol, Options{Fallbacks: 2, MaxBodyBytes: 4 << 10, MaxBufferedBodyBytes: 6 << 10, Registerer: w.prom, Rewrites: rw,
		SessionHeader: header, SessionIDs: ids, Disaggregation: disagg, Attributes: attrs})
	return w
}

// everyWorker is every worker object the world ever had, removed ones too.
func (w *fuzzWorld) everyWorker(seen map[*registry.Worker]bool) {
	for _, wk := range w.reg.Workers() {
		seen[wk] = true
	}
}

var (
	fuzzPaths = []string{"/v1/chat/completions", "/v1/completions", "/tokenize", "/v1/chat/completions?x=1", "/v1/realtime", "/v1/realtime?model=m", "/v1/audio/transcriptions",
		// vLLM's gRPC engine API: a method with a prompt, and one without
		openai.GeneratePath, "/vllm.grpc.engine.VllmEngine/HealthCheck"}
	fuzzBodies = []string{`{"model":"m","stream":true,"messages":[{"role":"user","content":"`, `hello world, a prompt long enough to fill a block or two of the index"}]}`, `{"model":"m","prompt":"p"}`, `{not json`, strings.Repeat("x", 3000),
		// an upload's front, with its model field, and its end
		"--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nRIFF", "\r\n--b--\r\n",
		// a gRPC Generate's message, and the front of one
		string(generateText("hello world, a prompt long enough to fill a block or two of the index")), string(generateText("cut short")[:9])}
	fuzzResponse = []string{sse("tok"), sseDone, `{"choices":[],"usage":{"prompt_tokens":3}}`, "data: {", "",
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7,"total_tokens":10}}` + "\n\n",
		// gRPC Generate responses: a chunk, the complete message, and one cut short
		string(generateChunk(5, 3, 1)), string(generateComplete(3, 7, 0)), string(generateComplete(3, 7, 0)[:6])}
	fuzzServed = []string{"", "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.9.9.9:1"}
)

func subsetVariant(v byte) *corev3.Metadata {
	switch v % 5 {
	case 1:
		return subsetHint(structpb.NewListValue(&structpb.ListValue{}))
	case 2:
		return subsetHint(structpb.NewStringValue("10.0.0.2:8000"))
	case 3:
		return subsetHint(structpb.NewStringValue("10.0.0.1,10.0.0.3:8000,nonsense"))
	case 4:
		return subsetHint(structpb.NewStringValue("192.0.2.1:1"))
	default:
		return nil
	}
}

// fuzzMessage builds the message op asks for; arg picks the variant and
// its low bit is end_of_stream.
func fuzzMessage(op, arg byte) *extprocv3.ProcessingRequest {
	eos := arg&1 == 1
	v := arg >> 1
	switch op {
	case 0:
		kv := []string{":method", "POST", ":path", fuzzPaths[int(v)%len(fuzzPaths)], "content-type", "application/json"}
		if strings.HasPrefix(kv[3], "/v1/realtime") { // a WebSocket: a tunnel, routed on its headers
			kv = append(kv, "connection", "upgrade", "upgrade", "websocket")
		}
		if strings.HasPrefix(kv[3], "/v1/audio/") { // an upload, routed on the front of its body
			kv[5] = "multipart/form-data; boundary=b"
		}
		if strings.HasPrefix(kv[3], "/vllm.") { // a gRPC call
			kv[5] = "application/grpc"
		}
		if v&4 != 0 {
			kv = append(kv, "content-length", []string{"16777216", "120", "-3", "x"}[int(v>>3)%4])
		}
		if v&8 != 0 {
			kv = append(kv, DestinationHeader, "192.0.2.7:80")
		}
		if v&32 != 0 {
			kv = append(kv, ModelRewriteHeader, "from-header")
		}
		if v&16 != 0 { // a session token: of a pod, of none, or none at all; and a session id, perhaps empty
			kv = append(kv, sessionHeader, []string{tokenOf("pod-1"), tokenOf("pod-2"), tokenOf("pod-7"), "%%"}[int(v>>2)%4],
				idHeader, []string{"agent-1", "agent-2", "", tokenOf("pod-1")}[int(v>>2)%4])
		}
		var pc *extprocv3.ProtocolConfiguration
		if v&64 != 0 { // the gateway's body modes: routed on the headers, as usual, or refused; the response's sent or not
			modes := []extprocfilterv3.ProcessingMode_BodySendMode{extprocfilterv3.ProcessingMode_NONE,
				extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_BUFFERED}
			pc = &extprocv3.ProtocolConfiguration{RequestBodyMode: modes[int(v>>1)%3], ResponseBodyMode: modes[int(v>>4)%2]}
		}
		return &extprocv3.ProcessingRequest{
			Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...), EndOfStream: eos}},
			MetadataContext: subsetVariant(v >> 4),
			ProtocolConfig:  pc,
		}
	case 1:
		return reqBody(fuzzBodies[int(v)%len(fuzzBodies)], eos)
	case 2:
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}}
	case 3:
		code := []int{200, 101, 500, 429}[int(v)%4]
		ct := []string{"text/event-stream", "application/json"}[int(v>>2)%2]
		var md *corev3.Metadata
		if served := fuzzServed[int(v>>3)%len(fuzzServed)]; served != "" {
			md = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
				lbNamespace: {Fields: map[string]*structpb.Value{ServedHeader: structpb.NewStringValue(served)}},
			}}
		}
		kv := []string{":status", fmt.Sprint(code), "content-type", ct}
		if v >= 64 { // a gRPC call's failure, in a trailers-only response
			kv = append(kv, "grpc-status", "13")
		}
		return &extprocv3.ProcessingRequest{
			Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: headerMap(kv...), EndOfStream: eos,
			}},
			MetadataContext: md,
		}
	case 4:
		return respBody(fuzzResponse[int(v)%len(fuzzResponse)], eos)
	case 5: // trailers, with a gRPC call's status: none, OK, or a failure
		var kv []string
		if st := []string{"", "0", "14"}[int(v)%3]; st != "" {
			kv = []string{"grpc-status", st}
		}
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(kv...)}}}
	default:
		return &extprocv3.ProcessingRequest{}
	}
}

// run plays ops (pairs of bytes) over up to four concurrent streams and
// then ends every stream. Op kinds: 0–6 a message, 7 cancel the stream, 8
// end it (EOF), 9 remove or restore a worker.
func (w *fuzzWorld) run(t testing.TB, ops []byte, seen map[*registry.Worker]bool) {
	var wg sync.WaitGroup
	peers := make([]*peer, 4)
	open := func(i int) *peer {
		ctx, cancel := context.WithCancel(context.Background())
		p := &peer{st: &chanStream{ctx: ctx, in: make(chan *extprocv3.ProcessingRequest), ack: make(chan struct{})}, cancel: cancel, done: make(chan struct{})}
		wg.Go(func() {
			defer close(p.done)
			_ = w.srv.Process(p.st)
		})
		peers[i] = p
		return p
	}
	for len(ops) >= 2 {
		op, arg := ops[0], ops[1]
		ops = ops[2:]
		i := int(op>>4) % len(peers)
		p := peers[i]
		if p == nil || p.closed {
			p = open(i)
		}
		select {
		case <-p.done:
			p.end()
			p = open(i)
		default:
		}
		switch kind := op & 0x0f % 10; kind {
		case 7:
			p.abort()
		case 8:
			p.end()
		case 9:
			w.churn(arg)
			w.everyWorker(seen)
		default:
			p.deliver(fuzzMessage(kind, arg))
		}
		for wk := range seen {
			if pf, dc := wk.Load(); pf < 0 || dc < 0 {
				t.Fatalf("worker %s load went negative: prefill %d decode %d", wk.Address(), pf, dc)
			}
		}
	}
	for _, p := range peers {
		if p != nil {
			p.end()
		}
	}
	wg.Wait()
	for _, p := range peers {
		if p != nil {
			p.cancel()
		}
	}
}

// churn removes the worker arg names, or brings every worker back (same
// addresses, new objects for the removed ones).
func (w *fuzzWorld) churn(arg byte) {
	if w.removed {
		for i := range w.eps {
			w.eps[i].Key.UID += "'"
		}
		w.reg.Replace(w.eps)
		w.removed = false
		return
	}
	keep := make([]registry.Endpoint, 0, len(w.eps))
	for i := range w.eps {
		if i != int(arg)%len(w.eps) {
			keep = append(keep, w.eps[i])
		}
	}
	w.reg.Replace(keep)
	w.removed = true
}

// FuzzExchange plays arbitrary message sequences, cancellations and worker
// churn over concurrent streams, then checks the guard invariant: every
// worker object ever seen is back at zero load, every routed request was
// released exactly once (and its prefill pod's guard too, when it had
// one), and nothing panicked.
func FuzzExchange(f *testing.F) {
	f.Add([]byte{0x00, 0x00, 0x01, 0x00, 0x01, 0x03, 0x03, 0x00, 0x04, 0x00, 0x04, 0x03})
	f.Add([]byte{0x00, 0x01, 0x00, 0x01, 0x00, 0x01, 0x00, 0x01})
	f.Add([]byte{0x00, 0x40, 0x10, 0x00, 0x01, 0x09, 0x11, 0x02, 0x03, 0x10, 0x13, 0x00, 0x07, 0x00, 0x15, 0x00})
	f.Add([]byte{0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x03, 0x20, 0x04, 0x00, 0x09, 0x00, 0x05, 0x00, 0x08, 0x00})
	f.Add([]byte{0x00, 0x20, 0x01, 0x00, 0x01, 0x03, 0x03, 0x04, 0x04, 0x00, 0x04, 0x03, 0x10, 0x38, 0x11, 0x03, 0x13, 0x00})
	// an upload routed on the front of its body, then its end, then a reply
	f.Add([]byte{0x00, 0x0c, 0x01, 0x0a, 0x01, 0x0d, 0x03, 0x00, 0x04, 0x03})
	// a session id's requests, on the ids' world (an odd number of bytes)
	f.Add([]byte{0x00, 0x26, 0x01, 0x05, 0x03, 0x00, 0x04, 0x03, 0x00, 0x26, 0x01, 0x05, 0x03})
	// a gRPC Generate, its chunk and complete messages, its trailers; then a
	// malformed one, and a HealthCheck that fails in its trailers
	f.Add([]byte{0x00, 0x44, 0x01, 0x0f, 0x03, 0x00, 0x04, 0x0c, 0x04, 0x0e, 0x05, 0x02,
		0x10, 0x44, 0x11, 0x11, 0x20, 0x10, 0x21, 0x01, 0x23, 0x00, 0x25, 0x04})
	f.Add(splitSeed)
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 512 {
			return
		}
		// An odd number of bytes: session ids; two more than a multiple
		// of four: prefill and decode split.
		w := newFuzzWorld(t, len(ops)%2 == 1, len(ops)%4 >= 2)
		seen := map[*registry.Worker]bool{}
		w.everyWorker(seen)
		w.run(t, ops, seen)
		w.check(t, seen)
	})
}

func (w *fuzzWorld) check(t testing.TB, seen map[*registry.Worker]bool) {
	for wk := range seen {
		if pf, dc := wk.Load(); pf != 0 || dc != 0 {
			t.Fatalf("worker %s (removed %v) holds load after every stream ended: prefill %d decode %d", wk.Address(), wk.Removed(), pf, dc)
		}
	}
	m := w.srv.metrics
	routed := testutil.ToFloat64(m.requests.WithLabelValues("200"))
	released := 0.0
	for _, r := range []string{reasonCompleted, reasonCancelled, reasonError, reasonViolation, reasonPrefilled} {
		released += testutil.ToFloat64(m.releases.WithLabelValues(r))
	}
	prefilled := w.prefillDecisions(t)
	if routed+prefilled != released {
		t.Fatalf("%v requests routed, %v of them prefilled apart, %v guards released (fallback moves aside)", routed, prefilled, released)
	}
	if n := testutil.ToFloat64(m.releases.WithLabelValues(reasonPanic)); n != 0 {
		t.Fatalf("%v releases after a panic", n)
	}
	families, err := w.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "inference_objective_running_requests" {
			continue
		}
		for _, m := range f.GetMetric() {
			if v := m.GetGauge().GetValue(); v != 0 {
				t.Fatalf("inference_objective_running_requests %v = %v after every stream ended", m.GetLabel(), v)
			}
		}
	}
	if used := w.srv.budget.Used(); used != 0 {
		t.Fatalf("%d bytes of the body budget still reserved after every stream ended", used)
	}
}

// splitSeed is a request prefilled apart, streamed to its end, on the
// world that splits prefill and decode (14 bytes), then a cancel of an
// idle stream.
var splitSeed = []byte{0x00, 0x00, 0x01, 0x00, 0x01, 0x03, 0x03, 0x00, 0x04, 0x00, 0x04, 0x03, 0x17, 0x00}

// The fuzz target's split world prefills apart: the prefill pod's guard
// is in what it checks.
func TestFuzzWorldPrefillsApart(t *testing.T) {
	w := newFuzzWorld(t, false, len(splitSeed)%4 >= 2)
	seen := map[*registry.Worker]bool{}
	w.everyWorker(seen)
	w.run(t, splitSeed, seen)
	w.check(t, seen)
	if n := w.prefillDecisions(t); n != 1 {
		t.Errorf("the split seed's request was prefilled apart %v times, want 1", n)
	}
	if n := testutil.ToFloat64(w.srv.metrics.releases.WithLabelValues(reasonPrefilled)); n != 1 {
		t.Errorf("%v prefill guards released at the first token, want 1", n)
	}
}

// prefillDecisions is how many routed requests were prefilled on a pod of
// their own.
func (w *fuzzWorld) prefillDecisions(t testing.TB) float64 {
	families, err := w.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, f := range families {
		if f.GetName() != "llm_d_inference_scheduler_disagg_decision_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "decision_type" && l.GetValue() == "prefill-decode" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
