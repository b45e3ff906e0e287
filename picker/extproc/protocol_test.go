package extproc

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

var twoWorkers = []string{"127.0.0.1:8000", "127.0.0.2:8000"}

func TestRouteHeadersAndBody(t *testing.T) {
	e := newEnv(t, twoWorkers)
	body := chatBody("m", strings.Repeat("long shared system prompt ", 6000)) // ~150 KB
	s := e.open()
	// A client tries to choose its own endpoint and subset.
	s.requestHeaders("/v1/chat/completions", len(body), false, nil,
		DestinationHeader, "10.9.9.9:80", ServedHeader, "10.9.9.9:80", SubsetKey, "10.9.9.9")
	// The body arrives in uneven chunks, as the gateway streams it.
	for i := 0; i < len(body); i += 17000 {
		end := min(i+17000, len(body))
		s.requestBody(body[i:end], end == len(body))
	}
	r := s.routed(true)

	if r.dest != "127.0.0.1:8000,127.0.0.2:8000" {
		t.Errorf("destination header = %q, want primary then fallback", r.dest)
	}
	if r.metaDest != r.dest {
		t.Errorf("envoy.lb metadata = %q, header = %q: they must agree", r.metaDest, r.dest)
	}
	if r.set["content-length"] != strconv.Itoa(len(body)) {
		t.Errorf("content-length = %q, want %d", r.set["content-length"], len(body))
	}
	if diff := cmp.Diff([]string{ServedHeader, SubsetKey, ObjectiveHeader, FairnessHeader, ModelRewriteHeader, policy.PrefillerHeader, policy.EncodersHeader, policy.DataParallelHeader}, r.removed); diff != "" {
		t.Errorf("removed headers (-want +got):\n%s", diff)
	}
	if !r.clear {
		t.Error("clear_route_cache not set")
	}
	if string(r.body) != body {
		t.Errorf("body returned differs: %d bytes, want %d", len(r.body), len(body))
	}
	if want := (len(body) + maxChunk - 1) / maxChunk; r.chunks != want {
		t.Errorf("body came back in %d chunks, want %d", r.chunks, want)
	}
	if p, d := e.worker("127.0.0.1:8000").Load(); p != 1 || d != 0 {
		t.Errorf("primary load = (%d,%d), want (1,0) after routing", p, d)
	}
}

// A gateway in buffered mode sends the whole body as one message, which
// may be larger than the transport's flow-control window for a stream.
func TestBodyMessageLargerThanTheStreamWindowIsRouted(t *testing.T) {
	e := newEnv(t, twoWorkers)
	body := chatBody("m", strings.Repeat("a buffered body past one window ", 100_000)) // ~3.2 MB
	s := e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	r := s.routed(true)
	if r.dest == "" {
		t.Fatal("no destination")
	}
	if string(r.body) != body {
		t.Errorf("body returned differs: %d bytes, want %d", len(r.body), len(body))
	}
}

func TestHeaderOnlyRequestIsRouted(t *testing.T) {
	e := newEnv(t, twoWorkers)
	s := e.open()
	s.requestHeaders("/v1/models", -1, true, nil)
	r := s.routed(false)
	if r.dest == "" {
		t.Fatal("no destination for a request without a body")
	}
	if _, ok := r.set["content-length"]; ok {
		t.Error("content-length set on a request without a body")
	}
}

// The body comes back ending where the client's request ended: on an empty
// final chunk (a chunked request with no data), the gateway holds the request
// until a chunk returns marked end of stream; with trailers, no chunk ends it,
// the trailers do.
func TestTheReturnedBodyEndsWhereTheRequestEnds(t *testing.T) {
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{Trailers: headerMap("x-checksum", "abc")}}}
	body := chatBody("m", "hello")
	cases := map[string]struct {
		send     func(s *session)
		body     string
		chunks   int  // body replies
		ends     bool // the last one is marked end of stream
		trailers bool
	}{
		"an empty final chunk": {send: func(s *session) { s.requestBody("", true) }, chunks: 1, ends: true},
		"trailers after a body": {send: func(s *session) {
			s.requestBody(body, false)
			s.send(trailers)
		}, body: body, chunks: 1, trailers: true},
		"trailers alone": {send: func(s *session) { s.send(trailers) }, trailers: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			s := e.open()
			s.requestHeaders("/v1/chat/completions", -1, false, nil)
			tc.send(s)
			// The response can only come once the request has gone upstream;
			// its reply is answered after the request's.
			s.responseHeaders(200, "application/json", true, "")
			if r := s.recv(); r.GetRequestHeaders() == nil {
				t.Fatalf("want the request headers reply, got %v", r)
			}
			var got []byte
			for i := range tc.chunks {
				b := s.recv().GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
				if b == nil {
					t.Fatalf("body reply %d of %d missing", i+1, tc.chunks)
				}
				got = append(got, b.GetBody()...)
				if last := i == tc.chunks-1; b.GetEndOfStream() != (last && tc.ends) {
					t.Errorf("body reply %d of %d: end_of_stream = %v", i+1, tc.chunks, b.GetEndOfStream())
				}
			}
			if string(got) != tc.body {
				t.Errorf("body returned %q, want %q", got, tc.body)
			}
			if tc.trailers {
				if r := s.recv(); r.GetRequestTrailers() == nil {
					t.Fatalf("want the request trailers reply, got %v", r)
				}
			}
			if r := s.recv(); r.GetResponseHeaders() == nil {
				t.Fatalf("want the response headers reply, got %v", r)
			}
			if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
				t.Errorf("load (%d,%d) after the response ended, want none", p, d)
			}
		})
	}
}

// The gateway's first message says how it sends bodies. In a buffered or
// streamed mode it would wait for the answer to the headers before sending
// the body the picker waits for, so each request would hang until the
// gateway's message timeout: such a request is refused at once, naming the
// setting. With NONE the picker routes on the headers alone.
func TestTheGatewaysBodyModesAreChecked(t *testing.T) {
	headers := func(req, resp extprocfilterv3.ProcessingMode_BodySendMode) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{
			Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: headerMap(":method", "POST", ":path", "/v1/completions", "content-length", "2000000000")}},
			ProtocolConfig: &extprocv3.ProtocolConfiguration{RequestBodyMode: req, ResponseBodyMode: resp},
		}
	}
	const duplex, none = extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_NONE
	for name, tc := range map[string]struct {
		req, resp extprocfilterv3.ProcessingMode_BodySendMode
		reason    string
	}{
		"buffered request":         {req: extprocfilterv3.ProcessingMode_BUFFERED, resp: duplex, reason: "request_body_mode is BUFFERED"},
		"streamed request":         {req: extprocfilterv3.ProcessingMode_STREAMED, resp: duplex, reason: "request_body_mode is STREAMED"},
		"partly buffered response": {req: duplex, resp: extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL, reason: "response_body_mode is BUFFERED_PARTIAL"},
		"request body not sent":    {req: none, resp: duplex},
		"neither body sent":        {req: none, resp: none},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			s := e.open()
			s.send(headers(tc.req, tc.resp))
			if tc.reason != "" {
				code, body := s.immediateReply()
				if code != 500 || !strings.Contains(body, tc.reason) || !strings.Contains(body, "FULL_DUPLEX_STREAMED") {
					t.Errorf("answer %d %s; want 500 naming %q and FULL_DUPLEX_STREAMED", code, body, tc.reason)
				}
				return
			}
			// Routed on the headers: no body comes, and its declared
			// length is not the picker's to judge. Its trailers pass.
			if r := s.routed(false); r.dest == "" {
				t.Fatal("no destination")
			}
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
				RequestTrailers: &extprocv3.HttpTrailers{Trailers: headerMap("x-checksum", "abc")}}})
			if r := s.recv(); r.GetRequestTrailers() == nil {
				t.Fatalf("want the request trailers reply, got %v", r)
			}
			s.responseHeaders(200, "application/json", true, "")
			if r := s.recv(); r.GetResponseHeaders() == nil {
				t.Fatalf("want the response headers reply, got %v", r)
			}
			if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
				t.Errorf("load (%d,%d) after the response ended, want none", p, d)
			}
		})
	}
}

// With request_body_mode NONE the gateway sends the request's trailers when
// the client sends them, which may be after the model server has answered:
// they are answered, and the response streams on to its end, its guard held
// until then.
func TestRequestTrailersAfterTheResponseHeadersPass(t *testing.T) {
	e := newEnv(t, twoWorkers)
	s := e.open()
	s.requestHeadersInModes(extprocfilterv3.ProcessingMode_NONE, extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED)
	if r := s.routed(false); r.dest == "" {
		t.Fatal("no destination")
	}
	s.responseHeaders(200, "text/event-stream", false, "")
	if r := s.recv(); r.GetResponseHeaders() == nil {
		t.Fatalf("want the response headers reply, got %v", r)
	}
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{Trailers: headerMap("x-checksum", "abc")}}})
	r, err := s.stream.Recv()
	if err != nil {
		t.Fatalf("the request's trailers ended the stream: %v", err)
	}
	if r.GetRequestTrailers() == nil {
		t.Fatalf("want the request trailers reply, got %v", r)
	}
	if p, d := totalLoad(e.reg.Workers()...); p+d != 1 {
		t.Errorf("load (%d,%d) while the response streams, want its guard", p, d)
	}
	s.responseBody(sse("hi"), false)
	s.recv()
	s.responseBody(sseDone, true)
	s.recv()
	eventually(t, "the response to complete", func() bool { return e.releases(reasonCompleted) == 1 })
	if n := e.releases(reasonViolation); n != 0 {
		t.Errorf("%v guards released as protocol violations, want none", n)
	}
	if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
		t.Errorf("load (%d,%d) after the response ended, want none", p, d)
	}
}

// With response_body_mode NONE the picker never sees the response body:
// Envoy ends the stream once it has nothing more to send it, which after a
// 2xx response is how the response ends. Duration and size are recorded as
// far as the picker knows them: to the stream's end, and the declared
// content-length.
func TestResponseBodyNotSentEndsWithTheStream(t *testing.T) {
	for name, tc := range map[string]struct {
		status   int
		length   string // the response's content-length, "" for none
		trailers bool   // the gateway sends the response trailers
		end      func(*session)
		reason   string
		want     map[string]uint64 // observations by histogram
	}{
		"2xx, the gateway ends the stream": {status: 200, end: closeSend, reason: reasonCompleted,
			want: map[string]uint64{"inference_objective_request_duration_seconds": 1, "inference_objective_response_sizes": 0}},
		"2xx with a length": {status: 200, length: "1234", end: closeSend, reason: reasonCompleted,
			want: map[string]uint64{"inference_objective_request_duration_seconds": 1, "inference_objective_response_sizes": 1}},
		"2xx, trailers end it": {status: 200, trailers: true, end: closeSend, reason: reasonCompleted,
			want: map[string]uint64{"inference_objective_request_duration_seconds": 1}},
		"2xx, the client goes away": {status: 200, end: func(s *session) { s.cancel() }, reason: reasonCancelled,
			want: map[string]uint64{"inference_objective_request_duration_seconds": 0}},
		"non-2xx": {status: 503, end: closeSend, reason: reasonError,
			want: map[string]uint64{"inference_objective_request_duration_seconds": 0}},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			s := e.open()
			body := chatBody("m", "hello")
			s.requestHeadersInModes(extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED, extprocfilterv3.ProcessingMode_NONE)
			s.requestBody(body, true)
			s.routed(true)
			kv := []string{":status", strconv.Itoa(tc.status), "content-type", "application/json"}
			if tc.length != "" {
				kv = append(kv, "content-length", tc.length)
			}
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
				ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(kv...)}}})
			s.recv()
			if tc.trailers {
				s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}})
				s.recv()
			}
			tc.end(s)
			released := func() map[string]float64 { return e.released(reasonCompleted, reasonCancelled, reasonError) }
			eventually(t, "release", func() bool { return len(released()) > 0 })
			if diff := cmp.Diff(map[string]float64{tc.reason: 1}, released()); diff != "" {
				t.Errorf("guard releases (-want +got):\n%s", diff)
			}
			got := map[string]uint64{}
			for name := range tc.want {
				got[name] = histCount(t, e, name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("observations (-want +got):\n%s", diff)
			}
		})
	}
}

func closeSend(s *session) {
	s.t.Helper()
	if err := s.stream.CloseSend(); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.stream.Recv(); err == nil {
		s.t.Fatal("want the stream to end")
	}
}

// histCount is the number of observations in the histograms of the family
// name, over all its series.
func histCount(t *testing.T, e *env, name string) uint64 {
	t.Helper()
	fams, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// An upload that names no model (vLLM serves it with its default model)
// is routed by load, unchanged.
func TestOtherPathsAreRoutedUnparsed(t *testing.T) {
	e := newEnv(t, twoWorkers)
	s := e.open()
	body := "--xyz\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nRIFF....\r\n--xyz--\r\n"
	s.requestHeaders("/v1/audio/transcriptions", len(body), false, nil, "content-type", "multipart/form-data; boundary=xyz")
	s.requestBody(body, true)
	r := s.routed(true)
	if r.dest != "127.0.0.1:8000,127.0.0.2:8000" || string(r.body) != body {
		t.Errorf("a multipart upload without a model was not routed unchanged to every pod: dest %q, body %d bytes", r.dest, len(r.body))
	}
}

// A JSON body on another path (score, rerank, tokenize) names its model:
// it goes to a pod that serves the model, or is answered 404 when none does;
// a body that is not JSON, or names no model, is routed by load.
func TestOtherPathsGoWhereTheirModelIsServed(t *testing.T) {
	e := newEnv(t, twoWorkers)
	pol, err := policy.Build(policy.Config{Name: policy.LeastLoad}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	e.worker("127.0.0.1:8000").SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"embedder"}, Complete: true}, Scraped: time.Now()})
	e.worker("127.0.0.2:8000").SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"reranker"}, Complete: true}, Scraped: time.Now()})
	send := func(path, body string) *session {
		s := e.open()
		s.requestHeaders(path, len(body), false, nil)
		s.requestBody(body, true)
		return s
	}
	for range 4 {
		if r := send("/v1/rerank", `{"model":"reranker","query":"q","documents":["a","b"]}`).routed(true); r.dest != "127.0.0.2:8000" {
			t.Fatalf("rerank for the reranker went to %q, want the pod serving it", r.dest)
		}
	}
	if code, _ := send("/score", `{"model":"nobody","text_1":"a","text_2":"b"}`).immediateReply(); code != 404 {
		t.Errorf("score for a model no pod serves: %d, want 404", code)
	}
	for _, body := range []string{`{"text":"no model"}`, `{"model":"reranker",`, "--xyz\r\n"} {
		if r := send("/tokenize", body).routed(true); r.dest == "" || string(r.body) != body {
			t.Errorf("body %q was not routed unchanged: dest %q, body %q", body, r.dest, r.body)
		}
	}
}

func TestSubsetHint(t *testing.T) {
	workers := []string{"127.0.0.1:8000", "127.0.0.2:8000", "127.0.0.2:9000", "127.0.0.3:8000"}
	list := func(vs ...string) *structpb.Value {
		l := make([]any, len(vs))
		for i, v := range vs {
			l[i] = v
		}
		v, _ := structpb.NewValue(l)
		return v
	}
	cases := map[string]struct {
		hint     *structpb.Value
		wantDest string
		wantCode int
	}{
		"list of ip:port":            {hint: list("127.0.0.3:8000"), wantDest: "127.0.0.3:8000"},
		"comma string":               {hint: structpb.NewStringValue("127.0.0.3:8000, 127.0.0.2:9000"), wantDest: "127.0.0.2:9000,127.0.0.3:8000"},
		"bare ip matches every port": {hint: list("127.0.0.2"), wantDest: "127.0.0.2:8000,127.0.0.2:9000"},
		"present but empty":          {hint: list(), wantCode: 503},
		"nothing of ours":            {hint: list("10.1.1.1:8000"), wantCode: 503},
		"garbage cannot widen":       {hint: structpb.NewStringValue("not-an-address"), wantCode: 503},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, workers)
			s := e.open()
			body := chatBody("m", "hello")
			s.requestHeaders("/v1/chat/completions", len(body), false, subsetHint(tc.hint))
			s.requestBody(body, true)
			if tc.wantCode != 0 {
				code, _ := s.immediateReply()
				if code != tc.wantCode {
					t.Errorf("status %d, want %d", code, tc.wantCode)
				}
				return
			}
			if r := s.routed(true); r.dest != tc.wantDest {
				t.Errorf("destination %q, want %q", r.dest, tc.wantDest)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	cases := map[string]struct {
		workers  []string
		picker   inOrder
		path     string
		body     string
		declared int // content-length; -1: use len(body)
		maxBody  int
		wantCode int
		wantMsg  string
	}{
		"bad json":             {path: "/v1/chat/completions", body: `{"model":"m",`, wantCode: 400},
		"no model":             {path: "/v1/chat/completions", body: `{"messages":[]}`, wantCode: 400, wantMsg: "model"},
		"model not a string":   {path: "/v1/completions", body: `{"model":7,"prompt":"x"}`, wantCode: 400, wantMsg: "model"},
		"declared too large":   {path: "/v1/completions", body: `{"model":"m","prompt":"x"}`, declared: 1 << 30, maxBody: 1024, wantCode: 413},
		"streamed too large":   {path: "/v1/completions", body: `{"model":"m","prompt":"` + strings.Repeat("x", 2000) + `"}`, declared: 0, maxBody: 1024, wantCode: 413},
		"no endpoints":         {workers: []string{}, path: "/v1/completions", body: `{"model":"m","prompt":"x"}`, wantCode: 503},
		"all saturated":        {picker: inOrder{err: policy.ErrSaturated}, path: "/v1/completions", body: `{"model":"m","prompt":"x"}`, wantCode: 429},
		"policy finds nothing": {picker: inOrder{err: policy.ErrNoCandidates}, path: "/v1/completions", body: `{"model":"m","prompt":"x"}`, wantCode: 503},
		"model not served":     {picker: inOrder{err: policy.ErrModelNotServed}, path: "/v1/completions", body: `{"model":"qwen","prompt":"x"}`, wantCode: 404, wantMsg: `"message":"The model ` + "`qwen`" + ` does not exist: no ready endpoint of the pool serves it.","type":"not_found_error","code":404`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			workers := twoWorkers
			if tc.workers != nil {
				workers = tc.workers
			}
			e := newEnv(t, workers, func(o *Options) { o.MaxBodyBytes = tc.maxBody })
			*e.picker = tc.picker
			s := e.open()
			declared := tc.declared
			if declared == 0 && tc.maxBody == 0 {
				declared = len(tc.body)
			}
			if declared == 0 {
				declared = -1 // no content-length: chunked
			}
			s.requestHeaders(tc.path, declared, false, nil)
			if tc.declared != 1<<30 {
				s.requestBody(tc.body, true)
			}
			code, msg := s.immediateReply()
			if code != tc.wantCode {
				t.Errorf("status %d, want %d (%s)", code, tc.wantCode, msg)
			}
			if !strings.Contains(msg, `"error"`) || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("body %s does not explain the error (want %q)", msg, tc.wantMsg)
			}
			if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
				t.Errorf("a rejected request left load (%d,%d)", p, d)
			}
		})
	}
}

// vLLM reads a bare string in a chat message's content array as a text
// part: such a request is routed, with the prompt of the same text sent as
// text parts, so both find the same cached prefix.
func TestStringContentPartsAreRoutedAsTextParts(t *testing.T) {
	e := newEnv(t, twoWorkers)
	var mu sync.Mutex
	var prompts []string
	e.picker.seen = func(r *policy.Request) {
		mu.Lock()
		defer mu.Unlock()
		prompts = append(prompts, string(bytes.Join(r.Prompt, nil)))
	}
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Hello, "},{"type":"text","text":"world"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":["Hello, ","world"]}]}`,
	} {
		s := e.open()
		s.requestHeaders("/v1/chat/completions", len(body), false, nil)
		s.requestBody(body, true)
		r := s.recv()
		if ir := r.GetImmediateResponse(); ir != nil {
			t.Fatalf("%s was answered %d: %s", body, ir.GetStatus().GetCode(), ir.GetBody())
		}
		if r.GetRequestHeaders() == nil {
			t.Fatalf("want the request headers reply, got %v", r)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(prompts) != 2 || prompts[0] != prompts[1] {
		t.Errorf("prompts %q, want the text parts' prompt twice", prompts)
	}
}

// vLLM decodes a body that begins with a UTF-8 byte order mark, and reads
// its booleans in pydantic's lax mode: such requests are routed, not
// answered 400.
func TestBodiesVLLMDecodesLaxlyAreRouted(t *testing.T) {
	for name, body := range map[string]string{
		"stream as 1":        `{"model":"m","stream":1,"messages":[{"role":"user","content":"hi"}]}`,
		"stream as a string": `{"model":"m","stream":"true","messages":[{"role":"user","content":"hi"}]}`,
		"include_usage as a string": `{"model":"m","stream":true,"stream_options":{"include_usage":"true"},` +
			`"messages":[{"role":"user","content":"hi"}]}`,
		"byte order mark": "\xef\xbb\xbf" + `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			s := e.open()
			s.requestHeaders("/v1/chat/completions", len(body), false, nil)
			s.requestBody(body, true)
			r := s.recv()
			if ir := r.GetImmediateResponse(); ir != nil {
				t.Fatalf("answered %d: %s", ir.GetStatus().GetCode(), ir.GetBody())
			}
			if r.GetRequestHeaders() == nil {
				t.Fatalf("want the request headers reply, got %v", r)
			}
		})
	}
}

func TestIgnoreSubsetHint(t *testing.T) {
	e := newEnv(t, twoWorkers, func(o *Options) { o.IgnoreSubsetHint = true })
	s := e.open()
	s.requestHeaders("/v1/models", -1, true, subsetHint(structpb.NewStringValue("10.9.9.9:80")))
	if r := s.routed(false); r.dest != "127.0.0.1:8000,127.0.0.2:8000" {
		t.Errorf("destination %q with the hint ignored, want the pool's endpoints", r.dest)
	}
}

// TestPoliciesPickIntoTheExchange: every policy appends its pick to the
// exchange's own slice, kept from stream to stream, so that a pick makes
// no slice of its own.
func TestPoliciesPickIntoTheExchange(t *testing.T) {
	for _, name := range []string{policy.CacheAware, policy.LeastLoad, policy.RoundRobin, policy.Random, policy.PowerOfTwo, policy.WeightedScorer} {
		pol, err := policy.Build(policy.Config{Name: name}, registry.New())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := pol.(appendPicker); !ok {
			t.Errorf("policy %s cannot append its pick: each request would allocate one", name)
		}
	}
}

// Envoy sends header values as raw_value, and every request reads several
// that are only parsed or compared (:status, content-length,
// content-type): reading one copies nothing to the heap.
func TestReadingARawHeaderDoesNotAllocate(t *testing.T) {
	hv := &corev3.HeaderValue{Key: ":status", RawValue: []byte("200")}
	var n int
	if got := testing.AllocsPerRun(100, func() { n, _ = strconv.Atoi(headerValue(hv)) }); got != 0 || n != 200 {
		t.Fatalf("strconv.Atoi(headerValue(raw :status)): %v allocations (n=%d), want 0", got, n)
	}
}
