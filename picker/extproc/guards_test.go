package extproc

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	otelcodes "go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// start routes one streaming chat request and returns the open session.
func (e *env) start(text string) *session {
	e.t.Helper()
	s := e.open()
	body := chatBody("m", text)
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	s.routed(true)
	return s
}

func (e *env) releases(reason string) float64 {
	return testutil.ToFloat64(e.server.metrics.releases.WithLabelValues(reason))
}

// released is the guard releases so far by reason, of those named, leaving
// out the reasons none was released for.
func (e *env) released(reasons ...string) map[string]float64 {
	out := map[string]float64{}
	for _, r := range reasons {
		if n := e.releases(r); n != 0 {
			out[r] = n
		}
	}
	return out
}

func TestCompletedRequestReturnsLoadToZero(t *testing.T) {
	e := newEnv(t, twoWorkers)
	w := e.worker("127.0.0.1:8000")
	s := e.start("say OK")

	s.responseHeaders(200, "text/event-stream", false, "")
	s.recv()
	if p, d := w.Load(); p != 1 || d != 0 {
		t.Fatalf("before the first token: (%d,%d), want (1,0)", p, d)
	}
	s.responseBody(sse("O"), false)
	s.recv()
	if p, d := w.Load(); p != 0 || d != 1 {
		t.Fatalf("after the first token: (%d,%d), want (0,1)", p, d)
	}
	s.responseBody(sse("K")+sseDone, false)
	s.recv()
	if p, d := w.Load(); p != 0 || d != 0 {
		t.Fatalf("after [DONE]: (%d,%d), want (0,0)", p, d)
	}
	// The end of the stream after [DONE] must not decrement again.
	s.responseBody("", true)
	s.recv()
	_ = s.stream.CloseSend()
	eventually(t, "stream end", func() bool { return e.releases(reasonCompleted) == 1 })
	if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
		t.Fatalf("final load (%d,%d), want 0", p, d)
	}
}

// The seed bug's test plan: one completed request, then three aborted ones,
// checking the load after each.
func TestAbortedRequestsLeaveNoLoad(t *testing.T) {
	e := newEnv(t, []string{"127.0.0.1:8000"})
	w := e.worker("127.0.0.1:8000")
	for i := range 3 {
		s := e.start("Count slowly from 1 to 1000, one number per line.")
		s.responseHeaders(200, "text/event-stream", false, "")
		s.recv()
		s.responseBody(sse("1\n"), false)
		s.recv()
		s.cancel() // the client went away; the gateway cancels the stream
		eventually(t, "release after abort", func() bool { return w.InFlight() == 0 })
		if got := e.releases(reasonCancelled); got != float64(i+1) {
			t.Errorf("after abort %d: %v cancelled releases, want %d", i+1, got, i+1)
		}
	}
}

func TestStalledUpstreamThenDisconnectReleases(t *testing.T) {
	e := newEnv(t, twoWorkers)
	w := e.worker("127.0.0.1:8000")
	s := e.start("stall")
	s.responseHeaders(200, "text/event-stream", false, "")
	s.recv()
	s.responseBody(sse("a"), false)
	s.recv()
	// The upstream sends nothing more. The picker is waiting on the stream;
	// the client leaves.
	s.cancel()
	eventually(t, "release while waiting for a chunk", func() bool { return w.InFlight() == 0 })
}

func TestFailureInPrefillDecrementsPrefill(t *testing.T) {
	e := newEnv(t, twoWorkers)
	w := e.worker("127.0.0.1:8000")
	s := e.start("fail me")
	s.responseHeaders(503, "application/json", false, "")
	s.recv()
	if p, d := w.Load(); p != 0 || d != 0 {
		t.Errorf("after a 503 from the model server: (%d,%d), want (0,0)", p, d)
	}
	if got := e.releases(reasonError); got != 1 {
		t.Errorf("error releases = %v, want 1", got)
	}
	s.responseBody(`{"error":"overloaded"}`, true)
	s.recv()
}

// A model server reports a failure that comes after its 200 went out (vLLM:
// an engine error, an abort) inside the response: an error event in the
// stream, or an error body. The request failed on the model server, as with
// a non-2xx status: an error release and a ModelServerError, not a
// completed response.
func TestErrorInsideA2xxResponseIsAModelServerError(t *testing.T) {
	const failed = `{"error":{"object":"error","message":"engine died","type":"InternalServerError","code":500}}`
	for name, tc := range map[string]struct {
		contentType string
		chunks      []string
		wantErrors  float64
		wantReason  string
	}{
		"error event in a stream": {contentType: "text/event-stream",
			chunks: []string{sse("partial"), "data: " + failed + "\n\n" + sseDone}, wantErrors: 1, wantReason: reasonError},
		"Responses failure event": {contentType: "text/event-stream",
			chunks: []string{"event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{}}\n\n"}, wantErrors: 1, wantReason: reasonError},
		"error body": {contentType: "application/json", chunks: []string{failed}, wantErrors: 1, wantReason: reasonError},
		"a stream that completes": {contentType: "text/event-stream",
			chunks: []string{sse("all"), sseDone}, wantReason: reasonCompleted},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			s := e.start("x")
			s.responseHeaders(200, tc.contentType, false, "")
			s.recv()
			for i, c := range tc.chunks {
				s.responseBody(c, i == len(tc.chunks)-1)
				s.recv()
			}
			got := map[string]float64{
				"model server errors": modelServerErrors(t, e),
				"completed":           e.releases(reasonCompleted),
				"error":               e.releases(reasonError),
			}
			want := map[string]float64{"model server errors": tc.wantErrors, "completed": 0, "error": 0}
			want[tc.wantReason] = 1
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
				t.Errorf("load (%d,%d) after the response ended, want none", p, d)
			}
		})
	}
}

// modelServerErrors is inference_objective_request_error_total over the
// requests the model servers failed.
func modelServerErrors(t *testing.T, e *env) float64 {
	t.Helper()
	fams, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() != "inference_objective_request_error_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "error_code" && l.GetValue() == "ModelServerError" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

func TestFallbackServedMovesTheGuard(t *testing.T) {
	e := newEnv(t, twoWorkers)
	primary, fallback := e.worker("127.0.0.1:8000"), e.worker("127.0.0.2:8000")
	s := e.start("retry")
	// The primary refused the connection; the gateway served the fallback.
	s.responseHeaders(200, "text/event-stream", false, "127.0.0.2:8000")
	s.recv()
	if primary.InFlight() != 0 || fallback.InFlight() != 1 {
		t.Fatalf("primary=%d fallback=%d, want 0 and 1", primary.InFlight(), fallback.InFlight())
	}
	s.responseBody(sse("x")+sseDone, true)
	s.recv()
	if primary.InFlight() != 0 || fallback.InFlight() != 0 {
		t.Fatalf("after completion primary=%d fallback=%d, want 0 0", primary.InFlight(), fallback.InFlight())
	}
}

// A fallback that served the request is where the prompt is now cached,
// and the policy learns so; one that answered with an error cached
// nothing, and the policy is not told it holds the prompt.
func TestOnlyAFallbackThatServedIsObserved(t *testing.T) {
	for name, tc := range map[string]struct {
		status int
		want   []string
	}{
		"served":       {status: 200, want: []string{"127.0.0.2:8000"}},
		"answered 503": {status: 503},
		"answered 404": {status: 404},
		"answered 500": {status: 500},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			e.picker.observed = &observations{}
			s := e.start("retry")
			s.responseHeaders(tc.status, "application/json", true, "127.0.0.2:8000")
			s.recv()
			if diff := cmp.Diff(tc.want, e.picker.observed.all()); diff != "" {
				t.Errorf("workers observed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServedAddressOutsideTheListIsIgnored(t *testing.T) {
	e := newEnv(t, twoWorkers)
	s := e.start("x")
	s.responseHeaders(200, "text/event-stream", false, "10.0.0.1:1")
	s.recv()
	if got := e.worker("127.0.0.1:8000").InFlight(); got != 1 {
		t.Errorf("primary load %d, want 1: a served address we never picked must not move the guard", got)
	}
}

func TestPanicReleasesAndEndsTheStream(t *testing.T) {
	e := newEnv(t, twoWorkers)
	s := e.start("boom")
	w := e.worker("127.0.0.1:8000")
	testHookResponseHeaders = func() { panic("handler bug") }
	t.Cleanup(func() { testHookResponseHeaders = nil })
	s.responseHeaders(200, "text/event-stream", false, "")
	if _, err := s.stream.Recv(); err == nil {
		t.Fatal("stream survived a panic")
	}
	if w.InFlight() != 0 {
		t.Errorf("load %d after a panic, want 0", w.InFlight())
	}
	if got := e.releases(reasonPanic); got != 1 {
		t.Errorf("panic releases = %v, want 1", got)
	}
}

// sendToAPickThatPanics sends a chat request whose pick panics, and checks
// that its stream ends.
func sendToAPickThatPanics(t *testing.T, e *env) {
	t.Helper()
	e.picker.panic = true
	s := e.open()
	body := chatBody("m", "x")
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	if _, err := s.stream.Recv(); err == nil {
		t.Fatal("stream survived a panic")
	}
}

func TestPickPanicLeavesNoLoad(t *testing.T) {
	e := newEnv(t, twoWorkers)
	sendToAPickThatPanics(t, e)
	if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
		t.Errorf("load (%d,%d), want 0", p, d)
	}
}

// A request whose pick panics fails (the gateway answers 500): it is
// counted as a 500 and an Internal error, so the error-ratio alert sees a
// policy that panics, and its pick span ends with the error.
func TestAPickThatPanicsIsCountedAsAnErrorAndItsSpanEnds(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	e := newEnv(t, twoWorkers, func(o *Options) { o.Tracer = tp.Tracer("inferpick") })
	sendToAPickThatPanics(t, e)
	if started, ended := len(spans.Started()), len(spans.Ended()); started != 2 || ended != started {
		t.Errorf("%d spans started, %d ended; want the request's and the pick's, both ended", started, ended)
	}
	for _, sp := range spans.Ended() {
		if sp.Status().Code != otelcodes.Error {
			t.Errorf("span %s ended with status %v, want an error", sp.Name(), sp.Status())
		}
	}
	if got := counters(t, e, "inferpick_requests_total")["code=500"]; got != 1 {
		t.Errorf("inferpick_requests_total{code=500} = %v, want 1", got)
	}
	want := map[string]float64{"error_code=Internal,model_name=m,target_model_name=m": 1}
	if diff := cmp.Diff(want, counters(t, e, "inference_objective_request_error_total")); diff != "" {
		t.Errorf("request_error_total (-want +got):\n%s", diff)
	}
}

func TestWorkerRemovedInFlight(t *testing.T) {
	e := newEnv(t, twoWorkers)
	old := e.worker("127.0.0.1:8000")
	sessions := []*session{e.start("a"), e.start("b")}
	sessions[0].responseHeaders(200, "text/event-stream", false, "")
	sessions[0].recv()
	sessions[0].responseBody(sse("t"), false)
	sessions[0].recv()

	// The pod goes away and comes back at the same address as a new pod.
	registrytest.Remove(e.reg, old.Endpoint().Key)
	ep := old.Endpoint()
	ep.Key.UID = "recreated"
	fresh := registrytest.Upsert(e.reg, ep)
	if fresh == old || fresh.InFlight() != 0 {
		t.Fatalf("re-created pod: same object=%v load=%d, want a new worker at 0", fresh == old, fresh.InFlight())
	}
	for _, w := range e.reg.Workers() {
		if w == old {
			t.Fatal("the removed worker is still a candidate")
		}
	}
	sessions[0].responseBody(sseDone, true)
	sessions[0].recv()
	sessions[1].cancel()
	eventually(t, "old guards released", func() bool { return old.InFlight() == 0 })
	if fresh.InFlight() != 0 {
		t.Errorf("old guards touched the re-created worker: load %d", fresh.InFlight())
	}
}

func TestLongRequestStaysCounted(t *testing.T) {
	e := newEnv(t, twoWorkers)
	w := e.worker("127.0.0.1:8000")
	long := e.start("a very long generation")
	long.responseHeaders(200, "text/event-stream", false, "")
	long.recv()
	long.responseBody(sse("first"), false)
	long.recv()
	// Many other requests come and go; nothing resets the long one.
	for range 50 {
		s := e.start("short")
		s.responseHeaders(200, "text/event-stream", false, "")
		s.recv()
		s.responseBody(sse("x")+sseDone, true)
		s.recv()
	}
	if p, d := w.Load(); p != 0 || d != 1 {
		t.Errorf("long request load (%d,%d), want (0,1)", p, d)
	}
	long.responseBody(sseDone, true)
	long.recv()
	if w.InFlight() != 0 {
		t.Errorf("after it ends: %d, want 0", w.InFlight())
	}
}

// A storm of streams cancelled at random phases leaves no load.
func TestCancelStorm(t *testing.T) {
	e := newEnv(t, []string{"127.0.0.1:8000", "127.0.0.2:8000", "127.0.0.3:8000"})
	const n = 300
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rng := rand.New(rand.NewPCG(uint64(i), 99))
			stormOne(e, rng.IntN(7))
		}()
	}
	wg.Wait()
	ws := e.reg.Workers()
	eventually(t, "all storm guards released", func() bool {
		p, d := totalLoad(ws...)
		return p == 0 && d == 0
	})
}

// stormOne runs one request and cancels it after phase steps.
func stormOne(e *env, phase int) {
	s := e.open()
	defer s.cancel()
	body := chatBody("m", strings.Repeat("storm ", 50))
	steps := []func() error{
		func() error {
			return s.stream.Send(reqHeaders("/v1/chat/completions", len(body)))
		},
		func() error { return s.stream.Send(reqBody(body[:10], false)) },
		func() error {
			if err := s.stream.Send(reqBody(body[10:], true)); err != nil {
				return err
			}
			for range 2 { // headers reply, body chunk
				if _, err := s.stream.Recv(); err != nil {
					return err
				}
			}
			return nil
		},
		func() error { return sendRecv(s, respHeaders(200)) },
		func() error { return sendRecv(s, respBody(sse("x"), false)) },
		func() error { return sendRecv(s, respBody(sse("y"), false)) },
	}
	for i := 0; i < phase && i < len(steps); i++ {
		if err := steps[i](); err != nil {
			return
		}
	}
}
