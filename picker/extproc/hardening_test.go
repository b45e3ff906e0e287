package extproc

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/picker/flowcontrol"
)

// endStatus reads until the stream ends and returns its status.
func (s *session) endStatus() *status.Status {
	s.t.Helper()
	// A stream the picker never ends would hold the test until its
	// deadline: it is cancelled instead, which no case wants.
	stop := time.AfterFunc(30*time.Second, s.cancel)
	defer stop.Stop()
	for {
		if _, err := s.stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return status.New(codes.OK, "")
			}
			return status.Convert(err)
		}
	}
}

func TestProtocolViolationsEndTheStreamAndReleaseTheGuard(t *testing.T) {
	body := chatBody("m", "hello")
	cases := map[string]struct {
		steps     func(s *session)
		wantMsg   string
		wantState string
		completed float64 // requests released as completed before the violation
	}{
		"request headers again after routing": {
			steps: func(s *session) {
				s.requestHeaders("/v1/chat/completions", len(body), false, nil)
				s.requestBody(body, true)
				s.routed(true)
				s.requestHeaders("/v1/chat/completions", -1, true, nil)
			},
			wantMsg: "request_headers", wantState: "awaiting_response",
		},
		"header-only request, then headers again": {
			steps: func(s *session) {
				s.requestHeaders("/v1/models", -1, true, nil)
				s.routed(false)
				s.requestHeaders("/v1/models", -1, true, nil)
			},
			wantMsg: "request_headers", wantState: "awaiting_response",
		},
		"body after a header-only request was routed": {
			steps: func(s *session) {
				s.requestHeaders("/v1/models", -1, true, nil)
				s.routed(false)
				s.requestBody(body, true)
			},
			wantMsg: "request_body", wantState: "awaiting_response",
		},
		"body before headers": {
			steps:   func(s *session) { s.requestBody(body, true) },
			wantMsg: "request_body", wantState: "awaiting_request",
		},
		"response body before response headers": {
			steps: func(s *session) {
				s.requestHeaders("/v1/chat/completions", len(body), false, nil)
				s.requestBody(body, true)
				s.routed(true)
				s.responseBody(sse("x"), false)
			},
			wantMsg: "response_body", wantState: "awaiting_response",
		},
		"response trailers for a request never answered": {
			steps: func(s *session) {
				s.requestHeaders("/v1/chat/completions", len(body), false, nil)
				s.requestBody(body, true)
				s.routed(true)
				s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}})
			},
			wantMsg: "response_trailers", wantState: "awaiting_response",
		},
		"second response headers after the first token": {
			steps: func(s *session) {
				s.requestHeaders("/v1/chat/completions", len(body), false, nil)
				s.requestBody(body, true)
				s.routed(true)
				s.responseHeaders(200, "text/event-stream", false, "")
				s.recv()
				s.responseBody(sse("x"), false)
				s.recv()
				s.responseHeaders(200, "text/event-stream", false, "127.0.0.2:8000")
			},
			wantMsg: "response_headers", wantState: "reading_response",
		},
		"anything after the response ended": {
			steps: func(s *session) {
				s.requestHeaders("/v1/models", -1, true, nil)
				s.routed(false)
				s.responseHeaders(200, "application/json", true, "")
				s.recv()
				s.responseBody("{}", true)
			},
			wantMsg: "response_body", wantState: "finished", completed: 1,
		},
		"a body after an upgrade's headers ended the request": {
			steps: func(s *session) {
				s.requestHeaders("/v1/realtime", -1, true, nil, "connection", "upgrade", "upgrade", "websocket")
				s.routed(false)
				s.requestBody("\x81\x00", false)
			},
			wantMsg: "request_body", wantState: "awaiting_response",
		},
		"a tunnel's bytes after the client ended its side": {
			steps: func(s *session) {
				s.requestHeaders("/v1/realtime", -1, false, nil, "connection", "upgrade", "upgrade", "websocket")
				s.routed(false)
				s.responseHeaders(101, "", false, "")
				s.recv()
				s.requestBody("\x88\x00", true)
				s.recv()
				s.requestBody("\x81\x00", false)
			},
			wantMsg: "request_body", wantState: "reading_response",
		},
		"a message with nothing in it": {
			steps:   func(s *session) { s.send(&extprocv3.ProcessingRequest{}) },
			wantMsg: "none", wantState: "awaiting_request",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			s := e.open()
			tc.steps(s)
			st := s.endStatus()
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.wantMsg) || !strings.Contains(st.Message(), tc.wantState) {
				t.Errorf("stream ended with %v, want InvalidArgument naming %s in %s", st, tc.wantMsg, tc.wantState)
			}
			eventually(t, "load back to 0", func() bool {
				p, d := totalLoad(e.reg.Workers()...)
				return p == 0 && d == 0
			})
			if n := testutil.ToFloat64(e.server.metrics.violations.WithLabelValues(tc.wantMsg, tc.wantState)); n != 1 {
				t.Errorf("violations{message=%s,state=%s} = %v, want 1", tc.wantMsg, tc.wantState, n)
			}
			if n := testutil.ToFloat64(e.server.metrics.releases.WithLabelValues(reasonCompleted)); n != tc.completed {
				t.Errorf("%v requests released as completed, want %v", n, tc.completed)
			}
		})
	}
}

// One stream sending hundreds of header messages naming one endpoint must
// not pin that endpoint's load.
func TestRepeatedHeadersCannotPinAnEndpoint(t *testing.T) {
	e := newEnv(t, twoWorkers)
	hint := subsetHint(structpb.NewStringValue("127.0.0.2:8000"))
	for range 300 {
		s := e.open()
		for range 3 {
			if err := s.stream.Send(&extprocv3.ProcessingRequest{
				Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":path", "/v1/models"), EndOfStream: true}},
				MetadataContext: hint,
			}); err != nil {
				break
			}
		}
		s.endStatus()
	}
	if p, d := e.worker("127.0.0.2:8000").Load(); p != 0 || d != 0 {
		t.Fatalf("hinted endpoint holds load (%d,%d) after every stream ended", p, d)
	}
	// It is still picked as primary.
	s := e.open()
	s.requestHeaders("/v1/models", -1, true, hint)
	if r := s.routed(false); r.dest != "127.0.0.2:8000" {
		t.Errorf("destination %q, want the hinted endpoint", r.dest)
	}
}

func TestLocalReplyBeforeRoutingHoldsNoGuard(t *testing.T) {
	e := newEnv(t, twoWorkers)
	s := e.open()
	s.requestHeaders("/v1/chat/completions", 100, false, nil)
	s.requestBody(`{"model":"m",`, false)
	// The gateway answers the client itself (a timeout) and sends that
	// response through the filter before the body ended.
	s.responseHeaders(504, "text/plain", false, "")
	s.recv()
	s.responseBody("upstream request timeout", true)
	s.recv()
	if err := s.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if st := s.endStatus(); st.Code() != codes.OK {
		t.Fatalf("stream ended with %v, want OK", st)
	}
	if n := testutil.ToFloat64(e.server.metrics.requests.WithLabelValues("200")); n != 0 {
		t.Errorf("%v requests routed, want none", n)
	}
	if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
		t.Errorf("load (%d,%d), want none", p, d)
	}
}

// Streams that announce a large body and send almost nothing hold a small
// buffer each, while a real large request still routes.
func TestDeclaredLengthReservesOnlyWhatArrives(t *testing.T) {
	const streams = 300
	e := newEnv(t, twoWorkers)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range streams {
		s := e.open()
		s.requestHeaders("/v1/chat/completions", 16<<20, false, nil)
		s.requestBody("{", false)
	}
	eventually(t, "every stream's first byte buffered", func() bool {
		return e.server.budget.Used() == streams*initialBodyBytes
	})
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Errorf("heap grew by %d MiB for %d streams that sent one byte each", grew>>20, streams)
	}
	body := chatBody("m", strings.Repeat("a long prompt ", 30000)) // ~400 KB
	s := e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	for i := 0; i < len(body); i += 16 << 10 {
		end := min(i+16<<10, len(body))
		s.requestBody(body[i:end], end == len(body))
	}
	if r := s.routed(true); string(r.body) != body {
		t.Errorf("the large request came back with %d bytes, want %d", len(r.body), len(body))
	}
}

func TestBodyBudgetAnswers429AndRecovers(t *testing.T) {
	e := newEnv(t, twoWorkers, func(o *Options) { o.MaxBufferedBodyBytes = 1 << 20 })
	part := strings.Repeat("x", 400<<10)
	var held []*session
	for range 2 {
		s := e.open()
		s.requestHeaders("/v1/completions", len(part)+100, false, nil)
		s.requestBody(part, false)
		held = append(held, s)
	}
	eventually(t, "two bodies buffered", func() bool { return e.server.budget.Used() >= 800<<10 })

	s := e.open()
	s.requestHeaders("/v1/completions", len(part)+100, false, nil)
	s.requestBody(part, false)
	r := s.recv().GetImmediateResponse()
	if r.GetStatus().GetCode() != 429 || !strings.Contains(string(r.GetBody()), "budget") {
		t.Fatalf("over the budget: got %v, want 429 naming the budget", r)
	}
	if got := headerSet(r.GetHeaders())["retry-after"]; got == "" {
		t.Error("429 without retry-after")
	}

	for _, h := range held {
		h.cancel()
	}
	eventually(t, "budget given back", func() bool { return e.server.budget.Used() == 0 })
	body := `{"model":"m","prompt":"` + part + `"}`
	s = e.open()
	s.requestHeaders("/v1/completions", len(body), false, nil)
	s.requestBody(body, true)
	s.routed(true)
}

// A request's body went upstream at routing: it holds no part of the body
// budget while its response is awaited and streams (minutes, for a long
// decode), or new requests would be turned away with 429 while nothing is
// being buffered. With a fallback listed, the prompt is needed until the
// response headers say which endpoint served the request.
func TestBodyBudgetIsNotHeldWhileTheResponseStreams(t *testing.T) {
	for name, tc := range map[string]struct {
		fallbacks int
		respond   bool // the response headers and a first token arrive
	}{
		"no fallback, awaiting the response": {fallbacks: 0},
		"a fallback listed, in decode":       {fallbacks: 1, respond: true},
		"no fallback, in decode":             {fallbacks: 0, respond: true},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers, func(o *Options) { o.MaxBufferedBodyBytes, o.Fallbacks = 1<<20, tc.fallbacks })
			body := chatBody("m", strings.Repeat("long context ", 50_000)) // ~650 KB
			first := e.open()
			first.requestHeaders("/v1/chat/completions", len(body), false, nil)
			first.requestBody(body, true)
			first.routed(true)
			if tc.respond {
				first.responseHeaders(200, "text/event-stream", false, "")
				first.recv()
				first.responseBody(sse("token"), false)
				first.recv()
			}
			eventually(t, "the body budget given back", func() bool { return e.server.budget.Used() == 0 })

			second := e.open()
			second.requestHeaders("/v1/chat/completions", len(body), false, nil)
			second.requestBody(body, true)
			if r := second.routed(true); r.dest == "" {
				t.Error("the second request was not routed")
			}
		})
	}
}

func headerSet(m *extprocv3.HeaderMutation) map[string]string {
	out := map[string]string{}
	for _, h := range m.GetSetHeaders() {
		out[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return out
}

func TestBudgetGrowsWithBytesReceived(t *testing.T) {
	cases := map[string]struct {
		chunks []int
		hint   int
		want   int // reserved after the chunks
	}{
		"declared 16 MiB, one byte":     {chunks: []int{1}, hint: 16 << 20, want: initialBodyBytes},
		"no length, one byte":           {chunks: []int{1}, want: 1},
		"declared small, exact":         {chunks: []int{100, 100}, hint: 200, want: 200},
		"past the first buffer doubles": {chunks: []int{initialBodyBytes, 1}, hint: 16 << 20, want: 2 * initialBodyBytes},
		"a large chunk at once":         {chunks: []int{1 << 20}, hint: 16 << 20, want: 1 << 20},
		"doubling stops at the length":  {chunks: []int{initialBodyBytes, 1}, hint: initialBodyBytes + 10, want: initialBodyBytes + 10},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := &bodyBudget{limit: 1 << 30}
			var body []byte
			reserved := 0
			for _, n := range tc.chunks {
				var ok bool
				body, reserved, ok = b.grow(body, reserved, n, tc.hint)
				if !ok {
					t.Fatal("budget refused")
				}
				body = append(body, make([]byte, n)...)
			}
			if reserved != tc.want || b.Used() != int64(tc.want) || cap(body) != tc.want {
				t.Errorf("reserved %d, budget used %d, buffer %d; want %d for all", reserved, b.Used(), cap(body), tc.want)
			}
		})
	}
}

func TestPooledBufferYieldsToTheBudget(t *testing.T) {
	pooled := make([]byte, 0, 1<<20)

	roomy := &bodyBudget{limit: 1 << 30}
	body, reserved, ok := roomy.grow(pooled, 0, 100, 0)
	if !ok || reserved != 1<<20 || cap(body) != 1<<20 || roomy.Used() != 1<<20 {
		t.Errorf("roomy budget: ok %v, reserved %d, buffer %d, used %d; want the pooled MiB held and reserved", ok, reserved, cap(body), roomy.Used())
	}

	tight := &bodyBudget{limit: 64 << 10}
	body, reserved, ok = tight.grow(pooled, 0, 100, 0)
	if !ok || reserved != 100 || cap(body) != 100 || tight.Used() != 100 {
		t.Errorf("tight budget: ok %v, reserved %d, buffer %d, used %d; want a fresh 100-byte buffer", ok, reserved, cap(body), tight.Used())
	}
}

// TestHeaderValuesThatAreNotUTF8 sends the headers the picker reads with a
// byte Envoy passes through (obs-text) but UTF-8 does not allow: the values
// become metric labels, span attributes and model names, and the request
// is routed as with any other value, not ended by a panic.
func TestHeaderValuesThatAreNotUTF8(t *testing.T) {
	for name, header := range map[string]string{
		"model rewrite": ModelRewriteHeader,
		"request id":    RequestIDHeader,
		"objective":     ObjectiveHeader,
		"fairness id":   FairnessHeader,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, []string{"127.0.0.1:8000"})
			s := e.open()
			body := chatBody("m", "hello")
			s.requestHeaders("/v1/chat/completions", len(body), false, nil, header, "caf\xe9")
			s.requestBody(body, true)
			s.routed(true)
			s.responseHeaders(200, "application/json", true, "")
			s.recv()
			_ = s.stream.CloseSend()
			eventually(t, "the guard released", func() bool { return e.releases("completed") == 1 })
			if n := e.releases("panic"); n != 0 {
				t.Errorf("%v handlers panicked", n)
			}
		})
	}
}

// A request waiting in the flow-control queue with a fairness id that is
// not UTF-8 waits like any other and is routed once capacity frees.
func TestQueuedFairnessIDThatIsNotUTF8(t *testing.T) {
	e, q, _ := queueEnv(t, flowcontrol.Options{})
	first := e.open()
	first.sendRequest("interactive")
	first.routed(true)

	waiting := e.open()
	body := chatBody("m", "hello")
	waiting.requestHeaders("/v1/chat/completions", len(body), false, nil, FairnessHeader, "t\xe9nant")
	waiting.requestBody(body, true)
	eventually(t, "the request queued", func() bool { return q.Len() == 1 })

	first.responseHeaders(200, "application/json", true, "")
	first.recv()
	waiting.routed(true)
	if q.Len() != 0 {
		t.Errorf("queue holds %d waiters after its only one was routed", q.Len())
	}
}

// A body of very many tiny messages makes a prompt segment list several
// times its own size (24 bytes a segment, from three body bytes): the list
// is charged to the body budget, so such a body is refused with 429 where
// its own bytes alone would fit, an ordinary body of the same size is
// routed, and every byte comes back when the streams end.
func TestPromptSegmentsAreChargedToTheBodyBudget(t *testing.T) {
	e := newEnv(t, twoWorkers, func(o *Options) { o.MaxBufferedBodyBytes = 1 << 20 })
	const size = 256 << 10
	tiny := `{"model":"m","messages":[{}` + strings.Repeat(`,{}`, size/3) + `]}`
	plain := chatBody("m", strings.Repeat("a prompt of ordinary words ", size/27))

	s := e.open()
	s.requestHeaders("/v1/chat/completions", len(tiny), false, nil)
	s.requestBody(tiny, true)
	r := s.recv().GetImmediateResponse()
	if r.GetStatus().GetCode() != 429 || !strings.Contains(string(r.GetBody()), "budget") {
		t.Fatalf("a body of %d empty messages: got %v, want 429 naming the budget", size/3, r)
	}
	eventually(t, "budget given back", func() bool { return e.server.budget.Used() == 0 })

	s = e.open()
	s.requestHeaders("/v1/chat/completions", len(plain), false, nil)
	s.requestBody(plain, true)
	s.routed(true)
	s.responseHeaders(200, "application/json", true, "")
	s.recv()
	_ = s.stream.CloseSend()
	eventually(t, "budget given back", func() bool { return e.server.budget.Used() == 0 })
}
