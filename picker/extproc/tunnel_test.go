package extproc

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/policy"
)

// promptly reads the next reply, failing the test when none comes within
// a bound wide enough for a loaded machine: a reply the picker never sends
// would otherwise hold the test until its deadline.
func promptly(t *testing.T, s *session, what string) *extprocv3.ProcessingResponse {
	t.Helper()
	stop := time.AfterFunc(30*time.Second, s.cancel)
	defer stop.Stop()
	r, err := s.stream.Recv()
	if err != nil {
		t.Fatalf("no reply to %s: %v", what, err)
	}
	return r
}

// A WebSocket (or any HTTP Upgrade) and a CONNECT open a tunnel: the client
// waits for the 101 (a CONNECT's 200) before it sends a byte, and the bytes that
// follow, both ways, are the tunnel's, not a body that ends. The picker
// routes such a request on its headers, by load, and passes its bytes
// through as they come; the session's guard is held until the tunnel
// closes, however it closes, and released once.
func TestATunnelIsRoutedOnItsHeaders(t *testing.T) {
	frame := "\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58" // a masked text frame, not JSON
	requests := map[string]struct {
		headers []string
		opened  int // the upstream's answer that opens the tunnel
	}{
		"websocket": {headers: []string{":method", "GET", ":path", "/v1/realtime?intent=transcription", ":authority", "gw",
			"connection", "upgrade", "upgrade", "websocket", "sec-websocket-version", "13", "sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="},
			opened: 101},
		"connect": {headers: []string{":method", "CONNECT", ":authority", "10.0.0.9:443"}, opened: 200},
	}
	ends := map[string]struct {
		refused bool // the upstream answers 404
		end     func(s *session)
		reason  string
	}{
		"the upstream closes": {end: func(s *session) {
			s.responseBody("\x88\x00", true)
			if r := promptly(s.t, s, "the closing frame").GetResponseBody(); r == nil {
				s.t.Fatal("want the response body reply")
			}
		}, reason: reasonCompleted},
		"the gateway ends the stream": {end: closeSend, reason: reasonCompleted},
		"the client goes away":        {end: func(s *session) { s.cancel() }, reason: reasonCancelled},
		"the upstream refuses": {refused: true, end: func(s *session) {
			s.responseBody(`{"detail":"Not Found"}`, true)
			promptly(s.t, s, "the refusal's body")
		}, reason: reasonError},
	}
	for rname, req := range requests {
		for ename, tc := range ends {
			t.Run(rname+", "+ename, func(t *testing.T) {
				e := newEnv(t, twoWorkers)
				s := e.open()
				s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
					RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(req.headers...)}}})
				hr := promptly(t, s, "the request headers").GetRequestHeaders()
				if hr == nil {
					t.Fatal("want the request headers answered with a route")
				}
				set := headerSet(hr.GetResponse().GetHeaderMutation())
				if set[DestinationHeader] == "" {
					t.Fatal("no destination for the tunnel")
				}
				if l, ok := set["content-length"]; ok {
					t.Errorf("content-length %s set on a request with no body", l)
				}
				if p, d := totalLoad(e.reg.Workers()...); p+d != 1 {
					t.Errorf("load (%d,%d) once routed, want the request's guard", p, d)
				}

				status := req.opened
				if tc.refused {
					status = 404
				}
				s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
					ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", strconv.Itoa(status))}}})
				if promptly(t, s, "the response headers").GetResponseHeaders() == nil {
					t.Fatal("want the response headers reply")
				}
				if !tc.refused {
					// The bytes go through both ways, as they came.
					s.requestBody(frame, false)
					got := promptly(t, s, "the client's frame").GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
					if got == nil || !bytes.Equal(got.GetBody(), []byte(frame)) || got.GetEndOfStream() {
						t.Fatalf("the client's frame came back as %v, want it as it was sent", got)
					}
					s.responseBody(frame, false)
					got = promptly(t, s, "the server's frame").GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
					if got == nil || !bytes.Equal(got.GetBody(), []byte(frame)) {
						t.Fatalf("the server's frame came back as %v, want it as it was sent", got)
					}
					if p, d := totalLoad(e.reg.Workers()...); p+d != 1 {
						t.Errorf("load (%d,%d) while the tunnel is open, want its guard", p, d)
					}
				}
				tc.end(s)

				reasons := []string{reasonCompleted, reasonCancelled, reasonError, reasonViolation}
				released := func() map[string]float64 {
					out := map[string]float64{}
					for _, r := range reasons {
						if n := e.releases(r); n != 0 {
							out[r] = n
						}
					}
					return out
				}
				eventually(t, "the guard's release", func() bool { return len(released()) > 0 })
				if diff := cmp.Diff(map[string]float64{tc.reason: 1}, released()); diff != "" {
					t.Errorf("guard releases (-want +got):\n%s", diff)
				}
				if p, d := totalLoad(e.reg.Workers()...); p != 0 || d != 0 {
					t.Errorf("load (%d,%d) after the tunnel closed, want none", p, d)
				}
			})
		}
	}
}

// Only an upgrade to another protocol opens a tunnel. An upgrade to h2c
// (HTTP/2 over cleartext, which curl asks for with --http2 on every plain
// http request) serves the same request, whose body is its own and ends: a
// chat request that carries it is read and routed on its prompt and model.
func TestOnlyAnUpgradeToAnotherProtocolOpensATunnel(t *testing.T) {
	tests := map[string]struct {
		upgrade string
		tunnel  bool
	}{
		"h2c":                   {upgrade: "h2c"},
		"h2c in capitals":       {upgrade: "H2C"},
		"h2c in a padded list":  {upgrade: " h2c ,"},
		"a list of nothing":     {upgrade: " , "},
		"websocket":             {upgrade: "websocket", tunnel: true},
		"websocket in any case": {upgrade: "WebSocket", tunnel: true},
		"websocket after h2c":   {upgrade: "h2c,  websocket", tunnel: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			models := make(chan string, 1)
			e.picker.seen = func(r *policy.Request) { models <- r.Model }
			body := chatBody("m", "a prompt worth caching")
			s := e.open()
			s.requestHeaders("/v1/chat/completions", len(body), false, nil,
				"connection", "Upgrade, HTTP2-Settings", "upgrade", tc.upgrade, "http2-settings", "AAMAAABkAARAAAAAAAIAAAAA")
			s.requestBody(body, true)
			if promptly(t, s, "the request").GetRequestHeaders() == nil {
				t.Fatal("want the request headers answered with a route")
			}
			want := "m" // read from the body
			if tc.tunnel {
				want = "" // routed on the headers
			}
			if got := <-models; got != want {
				t.Errorf("picked for model %q, want %q", got, want)
			}
		})
	}
}
