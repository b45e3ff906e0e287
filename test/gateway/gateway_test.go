package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
)

const waitLimit = 10 * time.Second

type seenRequest struct {
	Method, Path, Host string
	Header             http.Header
	Body               string
}

// upstream is a model server stand-in that records what reaches it.
func upstream(t *testing.T, status int, reply string) (string, chan seenRequest) {
	t.Helper()
	seen := make(chan seenRequest, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- seenRequest{Method: r.Method, Path: r.URL.RequestURI(), Host: r.Host, Header: r.Header.Clone(), Body: string(b)}
		w.Header().Set("X-Upstream", "yes")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, reply)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), seen
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	// The port stays bound to a socket that never listens, so connecting is
	// refused and no listener the test opens later can be given the port.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}

func startGateway(t *testing.T, picker string, opts ...Option) (*Gateway, string, chan Record) {
	t.Helper()
	records := make(chan Record, 16)
	opts = append([]Option{WithRecorder(func(r Record) { records <- r })}, opts...)
	g, err := New(picker, opts...)
	return g, serve(t, g, err), records
}

// serve serves g over HTTP on loopback until the test ends, then closes
// it; err is New's or NewCluster's, fatal when not nil.
func serve(t *testing.T, g *Gateway, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		srv.Close()
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv.URL
}

func waitFor[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("nothing arrived within %v", waitLimit)
		var zero T
		return zero
	}
}

// answer is what a client saw of a response whose body it read to the end.
type answer struct {
	StatusCode int
	Header     http.Header
}

// do sends req, reads and closes the response body and returns the answer and
// the body.
func do(t *testing.T, req *http.Request) (answer, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{StatusCode: resp.StatusCode, Header: resp.Header}, string(b)
}

// openStream posts a streamed completion with ctx and returns the response
// as soon as its headers arrive; the caller closes its body.
func openStream(ctx context.Context, t *testing.T, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func newRequest(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// The envoy.lb metadata chooses the upstream before the header does, unless
// the gateway routes on the header alone (WithHeaderRouting).
func TestDestinationSources(t *testing.T) {
	for name, tc := range map[string]struct {
		opts       []Option
		wantHeader bool
	}{
		"metadata first": {},
		"header only":    {opts: []Option{WithHeaderRouting()}, wantHeader: true},
	} {
		t.Run(name, func(t *testing.T) {
			byHeader, seenByHeader := upstream(t, http.StatusOK, `{"ok":true}`)
			byMetadata, seenByMetadata := upstream(t, http.StatusOK, `{"ok":true}`)
			picker := &fakePicker{endpoints: byHeader, metadataEndpoints: byMetadata}
			_, url, records := startGateway(t, newFakePicker(t, picker), tc.opts...)
			if resp, body := do(t, newRequest(t, http.MethodPost, url+"/v1/completions", `{"model":"m","prompt":"p"}`)); resp.StatusCode != http.StatusOK {
				t.Fatalf("client got %d %q", resp.StatusCode, body)
			}
			want, seen := byMetadata, seenByMetadata
			if tc.wantHeader {
				want, seen = byHeader, seenByHeader
			}
			waitFor(t, seen)
			if rec := waitFor(t, records); rec.Served != want {
				t.Errorf("served by %s, want %s", rec.Served, want)
			}
		})
	}
}

func TestMutationsReachUpstreamAndClient(t *testing.T) {
	for name, viaHeader := range map[string]bool{"metadata destination": false, "header destination": true} {
		t.Run(name, func(t *testing.T) {
			addr, seen := upstream(t, http.StatusOK, `{"ok":true}`)
			picker := &fakePicker{endpoints: addr, viaHeader: viaHeader, body: []byte(`{"model":"m","prompt":"rewritten"}`)}
			_, url, records := startGateway(t, newFakePicker(t, picker), WithChunkSize(8))

			req := newRequest(t, http.MethodPost, url+"/v1/completions?x=1", `{"model":"m","prompt":"hello world"}`)
			req.Header.Set("X-Remove-Me", "secret")
			req.Header.Set(KeyDestination, "10.9.9.9:1") // a client may not choose the endpoint
			resp, body := do(t, req)

			if resp.StatusCode != http.StatusOK || body != `{"ok":true}` {
				t.Fatalf("client got %d %q", resp.StatusCode, body)
			}
			if resp.Header.Get("X-Picker-Seen-Status") != "yes" || resp.Header.Get("X-Upstream") != "yes" {
				t.Errorf("response headers not processed: %v", resp.Header)
			}
			got := waitFor(t, seen)
			want := seenRequest{Method: http.MethodPost, Path: "/v1/completions?x=1", Host: strings.TrimPrefix(url, "http://"), Body: `{"model":"m","prompt":"rewritten"}`}
			if diff := cmp.Diff(want, got, cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "Header" }, cmp.Ignore())); diff != "" {
				t.Errorf("upstream request (-want +got):\n%s", diff)
			}
			if got.Header.Get("X-Picked") != "yes" || got.Header.Get("X-Remove-Me") != "" || got.Header.Get(KeyDestination) != addr {
				t.Errorf("upstream headers not mutated: %v", got.Header)
			}
			rec := waitFor(t, records)
			if rec.Served != addr || rec.Status != http.StatusOK || rec.ExtProcStreams != 1 {
				t.Errorf("record = %+v", rec)
			}
		})
	}
}

func TestRequestMessagesFollowEnvoy(t *testing.T) {
	addr, _ := upstream(t, http.StatusOK, "done")
	picker := &fakePicker{endpoints: addr}
	_, url, records := startGateway(t, newFakePicker(t, picker), WithChunkSize(4))
	do(t, newRequest(t, http.MethodPost, url+"/v1/chat/completions", "0123456789"))
	waitFor(t, records)

	var kinds []string
	var headers *extprocv3.HttpHeaders
	var served *structpb.Value
	for _, m := range picker.received() {
		switch r := m.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			kinds = append(kinds, "request_headers")
			headers = r.RequestHeaders
		case *extprocv3.ProcessingRequest_RequestBody:
			kinds = append(kinds, "request_body:"+string(r.RequestBody.GetBody())+eos(r.RequestBody.GetEndOfStream()))
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			kinds = append(kinds, "response_headers")
			served = m.GetMetadataContext().GetFilterMetadata()[NamespaceLB].GetFields()[KeyServed]
		case *extprocv3.ProcessingRequest_ResponseBody:
			kinds = append(kinds, "response_body:"+string(r.ResponseBody.GetBody())+eos(r.ResponseBody.GetEndOfStream()))
		}
	}
	want := []string{"request_headers", "request_body:0123", "request_body:4567", "request_body:89|eos", "response_headers", "response_body:done|eos"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if picker.received()[0].GetProtocolConfig() == nil {
		t.Error("first message has no protocol_config")
	}
	pseudo := map[string]string{}
	for _, h := range headers.GetHeaders().GetHeaders() {
		pseudo[h.GetKey()] = string(h.GetRawValue())
		if h.GetValue() != "" {
			t.Errorf("header %s sent as value, want raw_value", h.GetKey())
		}
	}
	for _, k := range []string{":method", ":path", ":authority", ":scheme", "content-length"} {
		if pseudo[k] == "" {
			t.Errorf("request_headers lack %s: %v", k, pseudo)
		}
	}
	if served.GetStringValue() != addr {
		t.Errorf("served metadata = %v, want %s", served, addr)
	}
}

func eos(end bool) string {
	if end {
		return "|eos"
	}
	return ""
}

func TestSubsetHintMetadata(t *testing.T) {
	cases := map[string]struct {
		header *string
		want   *structpb.Struct
	}{
		"no hint": {},
		"hint list": {
			header: ptr("10.0.0.1:8000, 10.0.0.2:8000"),
			want:   hintStruct("10.0.0.1:8000", "10.0.0.2:8000"),
		},
		"present but empty": {header: ptr(""), want: hintStruct()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			addr, _ := upstream(t, http.StatusOK, "ok")
			picker := &fakePicker{endpoints: addr}
			_, url, records := startGateway(t, newFakePicker(t, picker))
			req := newRequest(t, http.MethodGet, url+"/v1/models", "")
			if tc.header != nil {
				req.Header.Set(SubsetHintHeader, *tc.header)
			}
			do(t, req)
			waitFor(t, records)
			first := picker.received()[0]
			got := first.GetMetadataContext().GetFilterMetadata()[NamespaceSubsetHint]
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("subset hint (-want +got):\n%s", diff)
			}
			for _, h := range first.GetRequestHeaders().GetHeaders().GetHeaders() {
				if h.GetKey() == SubsetHintHeader {
					t.Errorf("test header %s reached the picker", SubsetHintHeader)
				}
			}
			if !first.GetRequestHeaders().GetEndOfStream() {
				t.Error("GET without body: request_headers end_of_stream = false")
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func hintStruct(eps ...string) *structpb.Struct {
	vals := make([]*structpb.Value, 0, len(eps))
	for _, ep := range eps {
		vals = append(vals, structpb.NewStringValue(ep))
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		KeySubset: structpb.NewListValue(&structpb.ListValue{Values: vals}),
	}}
}

func TestSSEStreamsChunkByChunk(t *testing.T) {
	next := make(chan struct{})
	buffered := make(chan string, 3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ev := range []string{"data: one\n\n", "data: two\n\n", "data: [DONE]\n\n"} {
			if i > 0 {
				// The next event is written only once the client has read this one.
				select {
				case <-next:
				case <-time.After(waitLimit):
					buffered <- ev
				}
			}
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	picker := &fakePicker{endpoints: srv.Listener.Addr().String()}
	_, url, records := startGateway(t, newFakePicker(t, picker))

	resp, err := http.DefaultClient.Do(newRequest(t, http.MethodPost, url+"/v1/completions", `{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	var got []string
	for i := range 3 {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("read event: %v (got %q)", err, got)
		}
		got = append(got, strings.TrimSpace(line))
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			// The upstream may not be waiting yet: a dropped signal would
			// stall it past the gateway's message timeout.
			select {
			case next <- struct{}{}:
			case <-time.After(waitLimit):
			}
		}
	}
	if diff := cmp.Diff([]string{"data: one", "data: two", "data: [DONE]"}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	select {
	case ev := <-buffered:
		t.Errorf("client did not get the event before %q was due: the response was buffered", ev)
	default:
	}
	if rec := waitFor(t, records); rec.TimeToFirstByte <= 0 {
		t.Errorf("record has no time to first byte: %+v", rec)
	}
}

func TestImmediateResponseReachesClient(t *testing.T) {
	addr, seen := upstream(t, http.StatusOK, "should not be called")
	picker := &fakePicker{endpoints: addr, immediate: immediate(typev3.StatusCode_TooManyRequests, "saturated")}
	g, url, records := startGateway(t, newFakePicker(t, picker))
	resp, body := do(t, newRequest(t, http.MethodPost, url+"/v1/completions", `{"model":"m"}`))
	if resp.StatusCode != http.StatusTooManyRequests || body != "saturated" || resp.Header.Get("X-Picker-Error") != "yes" {
		t.Errorf("client got %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if rec := waitFor(t, records); !rec.Immediate || len(rec.Attempts) != 0 {
		t.Errorf("record = %+v", rec)
	}
	select {
	case r := <-seen:
		t.Errorf("upstream called: %+v", r)
	default:
	}
	if c := g.Counters(); c.ImmediateResponses != 1 {
		t.Errorf("counters = %+v", c)
	}
}

func TestFallbackWalksEndpointList(t *testing.T) {
	cases := map[string]struct {
		primary func(t *testing.T) string
		want    []Attempt
	}{
		"connect failure": {
			primary: deadAddr,
			want:    []Attempt{{Err: "connection refused"}, {Status: http.StatusOK}},
		},
		"upstream 5xx": {
			primary: func(t *testing.T) string { a, _ := upstream(t, http.StatusServiceUnavailable, "busy"); return a },
			want:    []Attempt{{Status: http.StatusServiceUnavailable}, {Status: http.StatusOK}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			primary := tc.primary(t)
			fallback, seen := upstream(t, http.StatusOK, "from fallback")
			picker := &fakePicker{endpoints: primary + "," + fallback}
			_, url, records := startGateway(t, newFakePicker(t, picker))
			resp, body := do(t, newRequest(t, http.MethodPost, url+"/v1/completions", `{"model":"m"}`))
			if resp.StatusCode != http.StatusOK || body != "from fallback" {
				t.Fatalf("client got %d %q", resp.StatusCode, body)
			}
			if got := waitFor(t, seen); got.Body != `{"model":"m"}` {
				t.Errorf("fallback got body %q, want the replayed body", got.Body)
			}
			rec := waitFor(t, records)
			tc.want[0].Endpoint, tc.want[1].Endpoint = primary, fallback
			if diff := cmp.Diff(tc.want, rec.Attempts, cmp.Comparer(errContains)); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
			if rec.Served != fallback || rec.ExtProcStreams != 1 {
				t.Errorf("record = %+v", rec)
			}
			var servedMD []string
			for _, m := range picker.received() {
				if m.GetResponseHeaders() != nil {
					servedMD = append(servedMD, m.GetMetadataContext().GetFilterMetadata()[NamespaceLB].GetFields()[KeyServed].GetStringValue())
				}
			}
			if diff := cmp.Diff([]string{fallback}, servedMD); diff != "" {
				t.Errorf("served metadata sent to the picker (-want +got):\n%s", diff)
			}
		})
	}
}

// errContains compares attempt errors by substring so the table can name the cause.
func errContains(a, b string) bool {
	return a == b || (a != "" && strings.Contains(b, a)) || (b != "" && strings.Contains(a, b))
}
