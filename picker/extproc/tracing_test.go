package extproc

import (
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/inferpick/inferpick/picker/policy"
)

func TestTracing(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	e := newEnv(t, twoWorkers, func(o *Options) { o.Tracer = tp.Tracer("inferpick") })
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	body := chatBody("m", "hello")

	s := e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, "traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	s.requestBody(body, true)
	r := s.routed(true)
	if tp := r.set["traceparent"]; !strings.Contains(tp, traceID) {
		t.Errorf("routed request carries traceparent %q, want the incoming trace %s", tp, traceID)
	}
	s.responseHeaders(200, "text/event-stream", false, "")
	s.recv()
	if n := len(spans.Ended()); n != 1 {
		t.Fatalf("%d spans ended before the response ended, want the pick only", n)
	}
	s.responseBody(sse("x")+sseDone, true)
	s.recv()

	ended := spans.Ended()
	if len(ended) != 2 {
		t.Fatalf("%d spans ended, want the pick and the request", len(ended))
	}
	pick, req := ended[0], ended[1]
	if pick.Name() != spanPick || req.Name() != spanRequest {
		t.Fatalf("spans %q, %q; want %q then %q", pick.Name(), req.Name(), spanPick, spanRequest)
	}
	if got := req.Parent().TraceID().String(); got != traceID {
		t.Errorf("request span's parent trace %s, want %s", got, traceID)
	}
	if pick.Parent().SpanID() != req.SpanContext().SpanID() {
		t.Error("the pick span is not a child of the request span")
	}
	if !strings.Contains(r.set["traceparent"], req.SpanContext().SpanID().String()) {
		t.Errorf("routed traceparent %q does not name the request span %s", r.set["traceparent"], req.SpanContext().SpanID())
	}
	attrs := map[string]string{}
	for _, a := range pick.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["inferpick.endpoint"] != "127.0.0.1:8000" || attrs["gen_ai.request.model"] != "m" {
		t.Errorf("pick span attributes %v, want the endpoint and model", attrs)
	}
}

func TestTracingOffAddsNoHeaders(t *testing.T) {
	e := newEnv(t, twoWorkers)
	body := chatBody("m", "hello")
	s := e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", RequestIDHeader, "r1")
	s.requestBody(body, true)
	if r := s.routed(true); r.set["traceparent"] != "" || len(r.set) != 2 {
		t.Errorf("tracing off: routed with headers %v, want the destination and content-length only", r.set)
	}
}

// A request's query string can carry a credential (an api-key parameter,
// as some OpenAI clients send it): the request's span and the log line of
// its rejection name its path without it.
func TestSpansAndLogsLeaveOutTheQueryString(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	var logs *logRecorder
	e := newEnv(t, twoWorkers, func(o *Options) {
		o.Tracer = tp.Tracer("inferpick")
		logs = recordLogs(o)
	})
	s := e.open()
	s.requestHeaders("/v1/completions?api-key=sk-secret", 5, false, nil)
	s.requestBody(`{"x":`, true)
	s.immediateReply()

	ended := spans.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want the request's", len(ended))
	}
	for _, a := range ended[0].Attributes() {
		if a.Key == "http.path" && a.Value.AsString() != "/v1/completions" {
			t.Errorf("span attribute http.path = %q, want /v1/completions", a.Value.AsString())
		}
	}
	for _, l := range logs.Lines() {
		if strings.Contains(l, "sk-secret") {
			t.Errorf("log line carries the query string: %s", l)
		}
		if strings.Contains(l, "Rejected request") && !strings.Contains(l, `"path"="/v1/completions"`) {
			t.Errorf("rejection log line does not name the path: %s", l)
		}
	}
}

// A request naming a model of a megabyte, which no endpoint serves, costs
// a log line and a span of a bounded size: the name is cut.
func TestAHugeModelNameIsCutInLogsAndSpans(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	var mu sync.Mutex
	var logged int
	e := newEnv(t, []string{"127.0.0.1:8000"}, func(o *Options) {
		o.Tracer = tp.Tracer("inferpick")
		o.Log = funcr.New(func(_, args string) {
			mu.Lock()
			logged += len(args)
			mu.Unlock()
		}, funcr.Options{})
	})
	e.picker.err = policy.ErrModelNotServed
	s := e.open()
	body := chatBody(strings.Repeat("m", 1<<20), "hi")
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	if code, _ := s.immediateReply(); code != 404 {
		t.Fatalf("a model no endpoint serves: status %d, want 404", code)
	}

	const bound = 4 << 10
	mu.Lock()
	defer mu.Unlock()
	if logged == 0 || logged > bound {
		t.Errorf("the rejection logged %d bytes, want some and at most %d", logged, bound)
	}
	for _, sp := range spans.Ended() {
		n := len(sp.Status().Description)
		for _, a := range sp.Attributes() {
			n += len(a.Value.String())
		}
		if n > bound {
			t.Errorf("span %s holds %d bytes of attributes and status, want at most %d", sp.Name(), n, bound)
		}
	}
}
