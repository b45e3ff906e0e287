package extproc

import (
	"bytes"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/rewrite"
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

				released := func() map[string]float64 {
					return e.released(reasonCompleted, reasonCancelled, reasonError, reasonViolation)
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

// A WebSocket to a realtime API names its model in the query
// (/v1/realtime?model=...). The tunnel goes where that model is served,
// after any rewrite, as a request naming it in its body would, and the
// query the upstream reads names the model it is sent to; a model no pod
// serves is answered 404, as any request's is.
func TestATunnelGoesWhereItsQueryModelIsServed(t *testing.T) {
	const realtime, whisper = "127.0.0.1:8000", "127.0.0.2:8000"
	tests := map[string]struct {
		path     string
		headers  []string
		wantDest string // "": any pod
		wantPath string // the :path the request goes upstream with; "": unchanged
		wantCode int    // a local reply instead
		wantMsg  string
	}{
		"the model in the query":     {path: "/v1/realtime?model=gpt-4o-realtime-preview", wantDest: realtime},
		"the other pod's model":      {path: "/v1/realtime?model=whisper&intent=transcription", wantDest: whisper},
		"percent-encoded, not first": {path: "/v1/realtime?intent=transcription&model=gpt%2D4o%2drealtime-preview", wantDest: realtime},
		"a model named twice": {path: "/v1/realtime?model=whisper&model=gpt-4o-realtime-preview", wantCode: 400,
			wantMsg: "the query names the model parameter more than once"},
		"a model named twice, once escaped": {path: "/v1/realtime?model=whisper&x=1&mod%65l=whisper", wantCode: 400,
			wantMsg: "the query names the model parameter more than once"},
		"a model named twice, once empty": {path: "/v1/realtime?model&model=whisper", wantCode: 400,
			wantMsg: "the query names the model parameter more than once"},
		"a parameter ending in model":  {path: "/v1/realtime?xmodel=nobody"},
		"no query":                     {path: "/v1/realtime"},
		"an empty model":               {path: "/v1/realtime?model=&x=1"},
		"a model only in the fragment": {path: "/v1/realtime#model=nobody"},
		"rewritten by a rule": {path: "/v1/realtime?intent=x&model=realtime-old&y=1", wantDest: realtime,
			wantPath: "/v1/realtime?intent=x&model=gpt-4o-realtime-preview&y=1"},
		"rewritten by the header": {path: "/v1/realtime?model=some+name", headers: []string{ModelRewriteHeader, "whisper"}, wantDest: whisper,
			wantPath: "/v1/realtime?model=whisper"},
		"a model no pod serves": {path: "/v1/realtime?model=nob%C3%B6dy", wantCode: 404,
			wantMsg: "The model `nobödy` does not exist: no ready endpoint of the pool serves it."},
		"a broken escape":       {path: "/v1/realtime?model=whis%per", wantCode: 400, wantMsg: "model"},
		"a model name too long": {path: "/v1/realtime?model=" + strings.Repeat("m", maxQueryModel+1), wantCode: 400, wantMsg: "model"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tbl := rewrite.NewTable()
			tbl.Set("realtime", rewrite.Object{Created: time.Unix(0, 0), Rules: []rewrite.Rule{
				{Models: []string{"realtime-old"}, Targets: []rewrite.Target{{Model: "gpt-4o-realtime-preview"}}},
			}})
			e := newEnv(t, twoWorkers, func(o *Options) { o.Rewrites = tbl })
			pol, err := policy.Build(policy.Config{Name: policy.LeastLoad}, e.reg)
			if err != nil {
				t.Fatal(err)
			}
			e.server.picker = pol
			e.worker(realtime).SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"gpt-4o-realtime-preview"}, Complete: true}, Scraped: time.Now()})
			e.worker(whisper).SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"whisper"}, Complete: true}, Scraped: time.Now()})

			s := e.open()
			s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: headerMap(append([]string{":method", "GET", ":path", tc.path, ":authority", "gw",
					"connection", "upgrade", "upgrade", "websocket", "sec-websocket-version", "13"}, tc.headers...)...)}}})
			r := promptly(t, s, "the request headers")
			if tc.wantCode != 0 {
				ir := r.GetImmediateResponse()
				if code := int(ir.GetStatus().GetCode()); code != tc.wantCode || !strings.Contains(string(ir.GetBody()), tc.wantMsg) {
					t.Fatalf("answered %d %q, want %d naming %q", code, ir.GetBody(), tc.wantCode, tc.wantMsg)
				}
				return
			}
			set := headerSet(r.GetRequestHeaders().GetResponse().GetHeaderMutation())
			if dest := set[DestinationHeader]; dest == "" || tc.wantDest != "" && dest != tc.wantDest {
				t.Errorf("routed to %q, want %s alone", dest, tc.wantDest)
			}
			if got := set[":path"]; got != tc.wantPath {
				t.Errorf(":path set to %q, want %q", got, tc.wantPath)
			}
		})
	}
}

// FuzzQueryModel reads the model of any path's query: it reads as
// url.ParseQuery reads the query, a query that names the model twice is
// refused, its offsets are the raw value's, and a model written in its
// place reads back.
func FuzzQueryModel(f *testing.F) {
	for _, p := range []string{"/v1/realtime?model=gpt-4o-realtime-preview", "/v1/realtime?a=1&model=x%2Fy+z&model=2#model=3",
		"/v1/realtime?a=1&model=x%2Fy+z#model=3", "/?mod%65l=q", "/?model=a&mod%65l=a", "/?model=%zz", "/?model", "/?model&model",
		"/?&&model=&", "/v1/realtime", "/?model=%C3%28"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		model, start, end, err := queryModel(path)
		if _, raw, ok := strings.Cut(path, "?"); ok {
			query, _, _ := strings.Cut(raw, "#")
			if v, perr := url.ParseQuery(query); perr == nil && len(v["model"]) > 1 && err == nil {
				t.Fatalf("model %q read from a query that names %d: %q", model, len(v["model"]), v["model"])
			}
		}
		if err != nil {
			return
		}
		if model == "" {
			return
		}
		if start < 0 || start > end || end > len(path) {
			t.Fatalf("offsets [%d,%d) outside %q", start, end, path)
		}
		if raw, _ := url.QueryUnescape(path[start:end]); raw != model {
			t.Fatalf("model %q, its raw value %q decodes to %q", model, path[start:end], raw)
		}
		if len(model) > maxQueryModel || !utf8.ValidString(model) {
			t.Fatalf("model %q read, over the bound or not UTF-8", model)
		}
		query, _, _ := strings.Cut(path[strings.IndexByte(path, '?')+1:], "#")
		if v, err := url.ParseQuery(query); err == nil && v.Get("model") != model {
			t.Fatalf("model %q read, url.ParseQuery reads %q", model, v.Get("model"))
		}
		const target = "org/a model+1"
		again, _, _, err := queryModel(path[:start] + url.QueryEscape(target) + path[end:])
		if err != nil || again != target {
			t.Fatalf("the query rewritten to %q reads %q (%v)", target, again, err)
		}
	})
}

// openTunnel opens a WebSocket to the realtime API for model.
func (e *env) openTunnel(model string) *session {
	s := e.open()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":method", "GET", ":path", "/v1/realtime?model="+model, "connection", "upgrade", "upgrade", "websocket")}}})
	return s
}

// A tunnel waits in the flow-control queue while the pods of its model are
// full, as any request does (its client waits for the handshake's answer),
// without holding back a tunnel to another model's free pod, and it is
// routed when a place frees: here, when an open tunnel closes.
func TestATunnelWaitsForAPlaceOfItsModel(t *testing.T) {
	e, q := modelsEnv(t, flowcontrol.Options{}, oneModelEach)
	busy := e.openTunnel("model-0")
	busy.routed(false)
	busy.responseHeaders(101, "", false, "")
	promptly(t, busy, "the 101")
	waiting := e.openTunnel("model-0")
	eventually(t, "the second tunnel queued", func() bool { return q.Len() == 1 })

	if r := e.openTunnel("model-1").routed(false); r.dest != e.reg.Workers()[1].Address() {
		t.Errorf("the other model's tunnel went to %q, want its pod %s", r.dest, e.reg.Workers()[1].Address())
	}
	busy.responseBody("\x88\x00", true) // the upstream closes the first tunnel
	promptly(t, busy, "the closing frame")
	if r := waiting.routed(false); r.dest != e.reg.Workers()[0].Address() {
		t.Errorf("the waiting tunnel went to %q, want its model's pod %s", r.dest, e.reg.Workers()[0].Address())
	}
}

// A session's 101 is a handshake, not a first token, and its length is how
// long the user kept it open, not how long a request took: a tunnel counts
// as a request of its model but takes no place in the latency and size
// histograms, where one session of minutes would move the p99 that
// dashboards and alerts read for the model's requests.
func TestATunnelTakesNoPlaceInTheLatencyHistograms(t *testing.T) {
	e := newEnv(t, twoWorkers)
	for _, w := range e.reg.Workers() {
		w.SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"m"}, Complete: true}, Scraped: time.Now()})
	}
	s := e.open()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":method", "GET", ":path", "/v1/realtime?model=m",
			":authority", "gw", "connection", "upgrade", "upgrade", "websocket")}}})
	if promptly(t, s, "the request headers").GetRequestHeaders() == nil {
		t.Fatal("want the request headers answered with a route")
	}
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headerMap(":status", "101")}}})
	promptly(t, s, "the response headers")
	s.responseBody("\x81\x02hi", false)
	promptly(t, s, "the server's frame")
	s.responseBody("\x88\x00", true)
	promptly(t, s, "the closing frame")
	eventually(t, "the guard's release", func() bool { return e.releases(reasonCompleted) == 1 })

	if err := testutil.GatherAndCompare(e.metrics, strings.NewReader(`
# HELP inference_objective_request_total Requests routed, by model, target model and priority.
# TYPE inference_objective_request_total counter
inference_objective_request_total{model_name="m",priority="0",target_model_name="m"} 1
# HELP inference_objective_running_requests Requests routed whose response has not ended, by model.
# TYPE inference_objective_running_requests gauge
inference_objective_running_requests{model_name="m"} 0
`), "inference_objective_request_total", "inference_objective_running_requests"); err != nil {
		t.Error(err)
	}
	families, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil && h.GetSampleCount() != 0 && latencyOrSize(f.GetName()) {
				t.Errorf("%s took %d samples from a tunnel, want none", f.GetName(), h.GetSampleCount())
			}
		}
	}
}

func latencyOrSize(name string) bool {
	for _, n := range []string{"inferpick_time_to_first_token_seconds", "inference_objective_request_duration_seconds",
		"inference_objective_request_ttft_seconds", "inference_objective_response_sizes",
		"inference_objective_normalized_time_per_output_token_seconds"} {
		if name == n {
			return true
		}
	}
	return false
}
