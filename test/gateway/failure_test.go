package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestMessageTimeoutAndFailureMode(t *testing.T) {
	cases := map[string]struct {
		mode       FailureMode
		body       string
		wantStatus int
		wantOpen   bool
	}{
		"fail close":             {mode: FailClose, body: `{"model":"m"}`, wantStatus: http.StatusGatewayTimeout},
		"fail open without body": {mode: FailOpen, wantStatus: http.StatusOK, wantOpen: true},
		// Envoy fails closed once body data of a FULL_DUPLEX_STREAMED direction passed.
		"fail open after body sent": {mode: FailOpen, body: `{"model":"m"}`, wantStatus: http.StatusGatewayTimeout},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fallback, _ := upstream(t, http.StatusOK, "default upstream")
			picker := &fakePicker{stall: true}
			g, url, records := startGateway(t, newFakePicker(t, picker),
				WithMessageTimeout(50*time.Millisecond), WithFailureMode(tc.mode), WithDefaultUpstream(fallback))
			method := http.MethodGet
			if tc.body != "" {
				method = http.MethodPost
			}
			resp, body := do(t, newRequest(t, method, url+"/v1/completions", tc.body))
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status = %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if tc.wantOpen && body != "default upstream" {
				t.Errorf("body = %q, want the default upstream's", body)
			}
			rec := waitFor(t, records)
			if rec.FailedOpen != tc.wantOpen || rec.ProcessingError == nil {
				t.Errorf("record = %+v", rec)
			}
			if c := g.Counters(); c.MessageTimeouts != 1 {
				t.Errorf("counters = %+v", c)
			}
			if err := waitFor(t, picker.ended); err == nil {
				t.Error("stalled stream ended without cancellation")
			}
		})
	}
}

func TestPickerUnreachable(t *testing.T) {
	cases := map[string]struct {
		mode       FailureMode
		wantStatus int
	}{
		"fail close": {mode: FailClose, wantStatus: http.StatusInternalServerError},
		"fail open":  {mode: FailOpen, wantStatus: http.StatusOK},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fallback, seen := upstream(t, http.StatusOK, "default upstream")
			_, url, records := startGateway(t, deadAddr(t), WithFailureMode(tc.mode), WithDefaultUpstream(fallback))
			resp, _ := do(t, newRequest(t, http.MethodPost, url+"/v1/completions", `{"model":"m"}`))
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status = %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if rec := waitFor(t, records); rec.ExtProcStreams != 0 || rec.ProcessingError == nil {
				t.Errorf("record = %+v", rec)
			}
			if tc.mode == FailOpen {
				if got := waitFor(t, seen); got.Body != `{"model":"m"}` {
					t.Errorf("default upstream got body %q", got.Body)
				}
			}
		})
	}
}

func TestClientDisconnectCancelsStream(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	picker := &fakePicker{endpoints: srv.Listener.Addr().String()}
	g, url, records := startGateway(t, newFakePicker(t, picker))

	ctx, cancel := context.WithCancel(t.Context())
	resp := openStream(ctx, t, url)
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "data: one\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	cancel()
	_ = resp.Body.Close()

	if err := waitFor(t, picker.ended); err == nil {
		t.Error("picker's stream context did not end with the client")
	}
	if rec := waitFor(t, records); !rec.ClientGone {
		t.Errorf("record = %+v", rec)
	}
	if c := g.Counters(); c.ClientDisconnects != 1 {
		t.Errorf("counters = %+v", c)
	}
}

func TestNormalEndHalfClosesStream(t *testing.T) {
	addr, _ := upstream(t, http.StatusOK, "ok")
	picker := &fakePicker{endpoints: addr}
	_, url, records := startGateway(t, newFakePicker(t, picker))
	do(t, newRequest(t, http.MethodPost, url+"/v1/completions", `{"model":"m"}`))
	waitFor(t, records)
	if err := waitFor(t, picker.ended); err != nil {
		t.Errorf("picker's stream ended with %v, want a clean end of stream", err)
	}
}

// A client that declares a content-length, sends less and half-closes has cut
// its request short: Envoy resets the downstream connection instead of
// answering, and nothing is routed.
func TestShortBodyResetsDownstream(t *testing.T) {
	addr, seen := upstream(t, http.StatusOK, "should not be called")
	picker := &fakePicker{endpoints: addr}
	_, url, records := startGateway(t, newFakePicker(t, picker))

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"model\":\"m\""); err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := conn.SetReadDeadline(time.Now().Add(waitLimit)); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(conn); len(got) != 0 {
		t.Errorf("client got %q (read error %v), want the connection closed without a response", got, err)
	}
	rec := waitFor(t, records)
	if len(rec.Endpoints) != 0 || len(rec.Attempts) != 0 || !rec.ClientGone || rec.Status != 0 {
		t.Errorf("record = %+v", rec)
	}
	select {
	case got := <-seen:
		t.Errorf("upstream got %+v", got)
	default:
	}
}

// An upstream that dies in the middle of its response body: Envoy resets the
// downstream stream (the client sees its response cut, at once) and ends the
// ext_proc stream, so the picker releases the request.
func TestUpstreamDeathMidBodyResetsDownstream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close() // the model server's process died
		}
	}))
	t.Cleanup(srv.Close)
	picker := &fakePicker{endpoints: srv.Listener.Addr().String()}
	_, url, records := startGateway(t, newFakePicker(t, picker))

	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	resp := openStream(ctx, t, url)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("client read %q with error %v (deadline passed: %v), want the response reset at once", got, err, ctx.Err() != nil)
	}
	// What the picker had not returned yet when the upstream died is lost
	// with the stream, as in Envoy: the client sees a prefix of the body.
	if sent := "data: one\n\n"; sent[:min(len(got), len(sent))] != string(got) {
		t.Errorf("client got %q before the reset, want a prefix of what the upstream sent", got)
	}
	if rec := waitFor(t, records); !rec.Reset || !rec.UpstreamReset || rec.ProcessingError != nil {
		t.Errorf("record = %+v, want a downstream reset caused by the upstream", rec)
	}
	if err := waitFor(t, picker.ended); err == nil {
		t.Error("the picker's stream ended cleanly, want it cancelled")
	}
}

// TestRecordTimesTheRoutingApartFromTheArrival: a request whose body comes
// 5 s (of the gateway's clock) after its headers is routed once the body
// is in, and its record says so.
func TestRecordTimesTheRoutingApartFromTheArrival(t *testing.T) {
	addr, _ := upstream(t, http.StatusOK, "ok")
	picker := &fakePicker{endpoints: addr}
	clk := clocktesting.NewFakeClock(time.Now())
	_, url, records := startGateway(t, newFakePicker(t, picker), WithClock(clk), WithMessageTimeout(0))

	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const body = `{"model":"m"}`
	if _, err := io.WriteString(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 13\r\n\r\n"+body[:5]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitLimit)
	for len(picker.received()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the picker never got the request's headers")
		}
		runtime.Gosched()
	}
	clk.Step(5 * time.Second)
	if _, err := io.WriteString(conn, body[5:]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	rec := waitFor(t, records)
	if rec.Routed != 5*time.Second || rec.Duration < rec.Routed || len(rec.Endpoints) != 1 {
		t.Errorf("routed %v after arrival, duration %v, endpoints %v; want 5s, at least that, one", rec.Routed, rec.Duration, rec.Endpoints)
	}
}
