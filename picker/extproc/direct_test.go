package extproc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/registry"
)

// directWorld is a Server over two workers, served by a DirectServer with
// opts on a loopback port.
type directWorld struct {
	reg  *registry.Registry
	srv  *Server
	ds   *DirectServer
	addr string
}

func newDirectWorld(t *testing.T, opts DirectOptions) *directWorld {
	t.Helper()
	e := newEnv(t, twoWorkers) // for its registry and picker; its own server is not used
	w := &directWorld{reg: e.reg, srv: New(e.reg, e.picker, Options{Fallbacks: 1, Registerer: prometheus.NewRegistry()})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.ds = NewDirect(w.srv, opts)
	go func() { _ = w.ds.Serve(lis) }()
	t.Cleanup(w.ds.Stop)
	w.addr = lis.Addr().String()
	return w
}

func (w *directWorld) load() int64 {
	var sum int64
	for _, wk := range w.reg.Workers() {
		p, d := wk.Load()
		sum += p + d
	}
	return sum
}

func (w *directWorld) client(t *testing.T, opts ...grpc.DialOption) extprocv3.ExternalProcessorClient {
	conn, err := grpc.NewClient(w.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// routeOne sends a chat request's headers and body on a new stream and reads
// the routing reply and the body returned; it returns the stream.
func routeOne(t *testing.T, c extprocv3.ExternalProcessorClient, body string) extprocv3.ExternalProcessor_ProcessClient {
	t.Helper()
	st, err := c.Process(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	s := &session{t: t, stream: st}
	s.requestHeaders("/v1/chat/completions", len(body), false, nil)
	s.requestBody(body, true)
	if r := s.routed(true); string(r.body) != body {
		t.Fatalf("body came back as %d bytes, want %d", len(r.body), len(body))
	}
	return st
}

// A client with small flow-control windows still gets every reply: the
// server holds back what the window does not allow and sends it as the
// client's window updates arrive.
func TestDirectRepliesWaitForTheClientsWindow(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{})
	c := w.client(t, grpc.WithInitialWindowSize(16<<10), grpc.WithInitialConnWindowSize(16<<10))
	body := chatBody("m", strings.Repeat("a prompt the window cannot hold at once ", 5000)) // ~200 KB
	st := routeOne(t, c, body)
	if w.load() != 1 {
		t.Fatalf("load %d after routing, want 1", w.load())
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want EOF", err)
	}
	eventually(t, "every guard released", func() bool { return w.load() == 0 })
}

// A message over the bound ends its stream with RESOURCE_EXHAUSTED; an
// unknown method is UNIMPLEMENTED; the connection serves on.
func TestDirectRejectsWhatItDoesNotServe(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{MaxRecvMsgSize: 4 << 10})
	conn, err := grpc.NewClient(w.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := extprocv3.NewExternalProcessorClient(conn)

	st, err := c.Process(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(reqBody(strings.Repeat("x", 8<<10), true)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized message: %v, want ResourceExhausted", err)
	}

	other, err := conn.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/envoy.service.ext_proc.v3.ExternalProcessor/Other")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.RecvMsg(new(extprocv3.ProcessingResponse)); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v, want Unimplemented", err)
	}

	st = routeOne(t, c, chatBody("m", "still served"))
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want EOF", err)
	}
	eventually(t, "every guard released", func() bool { return w.load() == 0 })
}

// GracefulStop lets a routed request finish, refuses new streams, and
// returns when the last stream has ended.
func TestDirectGracefulStop(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{})
	c := w.client(t)
	st := routeOne(t, c, chatBody("m", "in flight during the stop"))
	stopped := make(chan struct{})
	go func() {
		w.ds.GracefulStop()
		close(stopped)
	}()
	s := &session{t: t, stream: st}
	s.responseHeaders(200, "text/event-stream", false, "")
	s.recv()
	select {
	case <-stopped:
		t.Fatal("GracefulStop returned while a stream was open")
	default:
	}
	s.responseBody(sse("tok")+sseDone, true)
	s.recv()
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want EOF", err)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("GracefulStop did not return after the last stream ended")
	}
	if w.load() != 0 {
		t.Fatalf("load %d after the stop, want 0", w.load())
	}
}

// rawClient is an HTTP/2 client written frame by frame, for what a gRPC
// client never does: fall silent, flood pings, send garbage.
type rawClient struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &rawClient{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	c.henc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return c
}

// open starts stream id on the Process method.
func (c *rawClient) open(id uint32) {
	c.hbuf.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", processPath}, {":authority", "picker"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = c.henc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

// send writes r as one gRPC message on stream id, in frames of at most
// HTTP/2's initial frame size.
func (c *rawClient) send(id uint32, r *extprocv3.ProcessingRequest) {
	b, err := proto.Marshal(r)
	if err != nil {
		c.t.Fatal(err)
	}
	msg := make([]byte, 5+len(b))
	grpcPrefix(msg, len(b))
	copy(msg[5:], b)
	for len(msg) > 0 {
		n := min(len(msg), initialMaxFrame)
		if err := c.fr.WriteData(id, false, msg[:n]); err != nil {
			c.t.Fatal(err)
		}
		msg = msg[n:]
	}
}

// request opens stream id and sends a chat completion request of text on
// it, headers and body.
func (c *rawClient) request(id uint32, text string) {
	body := chatBody("m", text)
	c.open(id)
	c.send(id, reqHeaders("/v1/chat/completions", len(body)))
	c.send(id, reqBody(body, true))
}

// routed reads until the routing reply of stream id arrives.
func (c *rawClient) routed(id uint32) {
	c.t.Helper()
	if c.readUntil(func(f http2.Frame) bool { return f.Header().Type == http2.FrameData && f.Header().StreamID == id }) == nil {
		c.t.Fatal("connection closed before the routing reply")
	}
}

// readUntil reads frames until match accepts one, the connection ends
// (it returns nil) or the deadline passes.
func (c *rawClient) readUntil(match func(http2.Frame) bool) http2.Frame {
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.t.Fatal("no matching frame within 10s")
			}
			return nil
		}
		if match(f) {
			return f
		}
	}
}

// A gateway that falls silent, with a request routed, is pinged; when it
// does not answer, the connection is closed and the request's guard is
// released.
func TestDirectKeepaliveClosesASilentConnection(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{KeepaliveTime: 50 * time.Millisecond, KeepaliveTimeout: 50 * time.Millisecond})
	c := dialRaw(t, w.addr)
	c.open(1)
	body := chatBody("m", "a request whose gateway goes silent")
	c.send(1, reqHeaders("/v1/chat/completions", len(body)))
	c.send(1, reqBody(body, true))
	if c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }) == nil {
		t.Fatal("connection closed before the routing reply")
	}
	if w.load() != 1 {
		t.Fatalf("load %d after routing, want 1", w.load())
	}
	// Read without answering: a ping arrives, then the connection ends.
	if c.readUntil(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && !p.IsAck() }) == nil {
		t.Fatal("connection closed without a ping")
	}
	if c.readUntil(func(http2.Frame) bool { return false }) != nil {
		t.Fatal("unreachable")
	}
	eventually(t, "every guard released", func() bool { return w.load() == 0 })
}

// A client that pings far more often than KeepaliveMinTime, with nothing
// sent to it in between, is told ENHANCE_YOUR_CALM and disconnected.
func TestDirectTooManyPings(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{KeepaliveMinTime: time.Hour})
	c := dialRaw(t, w.addr)
	for i := range 5 {
		if err := c.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			break // the server may already have closed
		}
	}
	f := c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if f == nil {
		t.Fatal("connection closed without GOAWAY")
	}
	if ga := f.(*http2.GoAwayFrame); ga.ErrCode != http2.ErrCodeEnhanceYourCalm || string(ga.DebugData()) != "too_many_pings" {
		t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", ga.ErrCode, ga.DebugData())
	}
}

// FuzzDirectConn feeds a connection arbitrary frames after a routed
// request: the server never panics, and once the connection closes every
// guard it took is released.
func FuzzDirectConn(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 5, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 7})                   // DATA, a message prefix claiming 7 bytes, no body
	f.Add([]byte{0, 0, 4, 3, 0, 0, 0, 0, 1, 0, 0, 0, 8})                      // RST_STREAM CANCEL
	f.Add([]byte{0, 0, 4, 8, 0, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff})          // WINDOW_UPDATE to the limit
	f.Add([]byte{0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0})                // SETTINGS INITIAL_WINDOW_SIZE 0
	f.Add([]byte{0, 0, 5, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0})                   // a compressed message
	f.Add([]byte{0, 0, 8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0})          // GOAWAY
	f.Add([]byte{0, 0, 3, 1, 5, 0, 0, 0, 3, 0x82, 0x87, 0x84})                // HEADERS of a second stream
	f.Add([]byte{0, 0, 9, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 4, 0x1a, 2, 0x12, 0}) // a response-headers message, END_STREAM
	f.Add(healthCheckFrames(3, []byte{0, 0, 0, 0, 2, 0x0a, 0}, true))         // a health check
	f.Add(healthCheckFrames(3, []byte{0, 0, 0, 0, 9, 0x0a}, false))           // a health check, cut short, left open
	f.Fuzz(func(t *testing.T, frames []byte) {
		w := newDirectWorld(t, DirectOptions{MaxRecvMsgSize: 64 << 10, MaxConcurrentStreams: 4,
			Health: func(string) (healthpb.HealthCheckResponse_ServingStatus, error) {
				return healthpb.HealthCheckResponse_SERVING, nil
			}})
		client, server := net.Pipe()
		w.ds.connsDone.Add(1)
		c := newDirectConn(w.ds, server)
		w.ds.mu.Lock()
		w.ds.conns[c] = true
		w.ds.mu.Unlock()
		served := make(chan struct{})
		go func() {
			c.serve()
			close(served)
		}()
		go func() { _, _ = io.Copy(io.Discard, client) }()
		rc := &rawClient{t: t, nc: client, fr: http2.NewFramer(client, client)}
		rc.henc = hpack.NewEncoder(&rc.hbuf)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		go func() {
			<-ctx.Done()
			_ = client.Close()
		}()
		if _, err := io.WriteString(client, http2.ClientPreface); err == nil && rc.fr.WriteSettings() == nil {
			rc.open(1)
			body := chatBody("m", "fuzzed")
			rc.send(1, reqHeaders("/v1/chat/completions", len(body)))
			rc.send(1, reqBody(body, true))
			_, _ = client.Write(frames)
		}
		_ = client.Close()
		<-served
		if w.load() != 0 {
			t.Fatalf("load %d after the connection closed, want 0", w.load())
		}
	})
}

// healthCheckFrames are the frames of a health check on stream id: its
// headers, then data, ending the stream if end.
func healthCheckFrames(id uint32, data []byte, end bool) []byte {
	var out, block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", healthCheckPath}, {":authority", "picker"}, {"content-type", "application/grpc"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	fr := http2.NewFramer(&out, nil)
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true})
	_ = fr.WriteData(id, end, data)
	return out.Bytes()
}

// A health check's request is a service name: a longer one is refused with
// RESOURCE_EXHAUSTED, a framed message that ends early with INTERNAL, and
// the connection serves on.
func TestDirectHealthCheckRequestsAreBounded(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{Health: func(string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		return healthpb.HealthCheckResponse_SERVING, nil
	}})
	c := dialRaw(t, w.addr)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	grpcStatus := func(id uint32) string {
		t.Helper()
		var got string
		c.readUntil(func(f http2.Frame) bool {
			h, ok := f.(*http2.MetaHeadersFrame)
			if !ok || h.StreamID != id {
				return false
			}
			for _, hf := range h.Fields {
				if hf.Name == "grpc-status" {
					got = hf.Value
					return true
				}
			}
			return false
		})
		return got
	}
	long := make([]byte, maxHealthRequest+1)
	if _, err := c.nc.Write(healthCheckFrames(1, long, false)); err != nil {
		t.Fatal(err)
	}
	if got := grpcStatus(1); got != "8" {
		t.Errorf("grpc-status %q for a request over %d bytes, want 8 (RESOURCE_EXHAUSTED)", got, maxHealthRequest)
	}
	if _, err := c.nc.Write(healthCheckFrames(3, []byte{0, 0, 0, 0, 9, 0x0a}, true)); err != nil {
		t.Fatal(err)
	}
	if got := grpcStatus(3); got != "13" {
		t.Errorf("grpc-status %q for a message cut short, want 13 (INTERNAL)", got)
	}
	if _, err := c.nc.Write(healthCheckFrames(5, nil, true)); err != nil {
		t.Fatal(err)
	}
	if got := grpcStatus(5); got != "0" {
		t.Errorf("grpc-status %q for the empty service name, want 0", got)
	}

	// A request its client ends with trailers is answered too.
	if _, err := c.nc.Write(healthCheckFrames(7, []byte{0, 0, 0, 0, 2, 0x0a, 0}, false)); err != nil {
		t.Fatal(err)
	}
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: "x-trailer", Value: "1"})
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 7, BlockFragment: c.hbuf.Bytes(), EndHeaders: true, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	if got := grpcStatus(7); got != "0" {
		t.Errorf("grpc-status %q for a request ended by trailers, want 0", got)
	}

	// Requests left open are bounded: past maxHealthCalls, refused.
	id := uint32(9)
	for range maxHealthCalls {
		if _, err := c.nc.Write(healthCheckFrames(id, []byte{0}, false)); err != nil {
			t.Fatal(err)
		}
		id += 2
	}
	if _, err := c.nc.Write(healthCheckFrames(id, []byte{0}, false)); err != nil {
		t.Fatal(err)
	}
	rst := c.readUntil(func(f http2.Frame) bool { r, ok := f.(*http2.RSTStreamFrame); return ok && r.StreamID == id })
	if rst == nil || rst.(*http2.RSTStreamFrame).ErrCode != http2.ErrCodeRefusedStream {
		t.Errorf("health check %d past the bound: %v, want REFUSED_STREAM", id, rst)
	}
}

// A stream whose headers are malformed is reset on its own: its frames
// still in flight are ignored, and the connection serves the next stream.
func TestDirectMalformedHeadersResetOnlyTheirStream(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{})
	c := dialRaw(t, w.addr)
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":method", Value: "POST"})
	_ = c.henc.WriteField(hpack.HeaderField{Name: "Upper-Case", Value: "not allowed in HTTP/2"})
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	c.send(1, reqHeaders("/v1/chat/completions", 0))
	rst := c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst == nil || rst.Header().StreamID != 1 {
		t.Fatalf("got %v, want RST_STREAM on stream 1", rst)
	}
	c.open(3)
	body := chatBody("m", "the next stream")
	c.send(3, reqHeaders("/v1/chat/completions", len(body)))
	c.send(3, reqBody(body, true))
	if f := c.readUntil(func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && d.StreamID == 3 }); f == nil {
		t.Fatal("connection closed instead of serving stream 3")
	}
	if w.load() != 1 {
		t.Fatalf("load %d after routing stream 3, want 1", w.load())
	}
}

// A graceful stop serves a stream the gateway opened before it read the
// first GOAWAY: the final GOAWAY, naming the last stream, follows the
// gateway's answer to the drain ping, and streams after it are refused.
func TestDirectGracefulStopServesStreamsOpenedBeforeTheGOAWAY(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{})
	c := dialRaw(t, w.addr)
	// A first stream, so that the connection is known to the server.
	first1 := chatBody("m", "the connection's first stream")
	c.open(1)
	c.send(1, reqHeaders("/v1/chat/completions", len(first1)))
	c.send(1, reqBody(first1, true))
	if c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }) == nil {
		t.Fatal("no reply on stream 1")
	}
	go w.ds.GracefulStop()
	first := c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if first == nil || first.(*http2.GoAwayFrame).LastStreamID != maxWindow {
		t.Fatalf("first GOAWAY %v, want one naming no last stream", first)
	}
	ping := c.readUntil(func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && !p.IsAck() })
	if ping == nil {
		t.Fatal("no drain ping after the first GOAWAY")
	}
	// Opened before the gateway answers the ping: served.
	body := chatBody("m", "opened as the stop began")
	c.open(3)
	c.send(3, reqHeaders("/v1/chat/completions", len(body)))
	c.send(3, reqBody(body, true))
	if c.readUntil(func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && d.StreamID == 3 }) == nil {
		t.Fatal("stream 3 was not served")
	}
	if err := c.fr.WritePing(true, ping.(*http2.PingFrame).Data); err != nil {
		t.Fatal(err)
	}
	final := c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if final == nil || final.(*http2.GoAwayFrame).LastStreamID != 3 {
		t.Fatalf("final GOAWAY %v, want last stream 3", final)
	}
	c.open(5)
	rst := c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok && f.Header().StreamID == 5 })
	if rst == nil || rst.(*http2.RSTStreamFrame).ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("stream 5 after the final GOAWAY: %v, want REFUSED_STREAM", rst)
	}
	if w.load() != 2 {
		t.Fatalf("load %d, want the requests of streams 1 and 3 in flight", w.load())
	}
}

// The stream cap is announced in the server's settings; a stream opened
// beyond it is refused before any work, and the streams within it are
// served.
func TestDirectRefusesStreamsBeyondTheCap(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{MaxConcurrentStreams: 1})
	c := dialRaw(t, w.addr)
	f := c.readUntil(func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && !s.IsAck() })
	if v, ok := f.(*http2.SettingsFrame).Value(http2.SettingMaxConcurrentStreams); !ok || v != 1 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent: %v), want 1", v, ok)
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	body := chatBody("m", "within the cap")
	c.open(1)
	c.send(1, reqHeaders("/v1/chat/completions", len(body)))
	c.send(1, reqBody(body, true))
	if c.readUntil(func(f http2.Frame) bool { return f.Header().Type == http2.FrameData && f.Header().StreamID == 1 }) == nil {
		t.Fatal("connection closed before the routing reply")
	}
	c.open(3)
	c.send(3, reqHeaders("/v1/chat/completions", len(body)))
	rst := c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst == nil || rst.Header().StreamID != 3 || rst.(*http2.RSTStreamFrame).ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("second stream ended with %v, want RST_STREAM REFUSED_STREAM on stream 3", rst)
	}
	if w.load() != 1 {
		t.Fatalf("load %d, want 1: the refused stream took no guard", w.load())
	}
	// The first stream ends; a new one fits again.
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cancelled stream's guard released", func() bool { return w.load() == 0 })
	c.open(5)
	c.send(5, reqHeaders("/v1/chat/completions", len(body)))
	c.send(5, reqBody(body, true))
	if c.readUntil(func(f http2.Frame) bool {
		_, rst := f.(*http2.RSTStreamFrame)
		return f.Header().StreamID == 5 && (rst || f.Header().Type == http2.FrameData)
	}).Header().Type != http2.FrameData {
		t.Fatal("the stream opened after the first ended was refused")
	}
}

// A gateway that stops reading while it goes on sending (SETTINGS, each of
// which the server acknowledges) fills the connection's buffers until the
// server's writes wait. One that waits longer than the keepalive timeout
// closes the connection: its stream's guard is released, and a graceful
// stop returns.
func TestDirectAGatewayThatReadsNothingIsClosed(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{KeepaliveTimeout: 300 * time.Millisecond})
	c := dialRaw(t, w.addr)
	c.request(1, "the gateway reads nothing after this")
	c.routed(1)
	if w.load() != 1 {
		t.Fatalf("load %d after routing, want 1", w.load())
	}
	var flood bytes.Buffer
	fr := http2.NewFramer(&flood, nil)
	for range 4096 {
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		for {
			if _, err := c.nc.Write(flood.Bytes()); err != nil {
				return // closed by the server, or at the test's end
			}
		}
	}()
	eventually(t, "the connection closed and the stream's guard released", func() bool { return w.load() == 0 })
	w.ds.GracefulStop()
}

// A window raised past 2^31-1 is a flow-control error: a stream's resets
// that stream alone (its guard released), the connection's ends the
// connection.
func TestDirectWindowsRaisedPastTheirLimitAreFlowControlErrors(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{})
	c := dialRaw(t, w.addr)
	c.request(1, "a window too wide")
	c.routed(1)
	if err := c.fr.WriteWindowUpdate(1, maxWindow); err != nil {
		t.Fatal(err)
	}
	f := c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if f == nil || f.Header().StreamID != 1 || f.(*http2.RSTStreamFrame).ErrCode != http2.ErrCodeFlowControl {
		t.Fatalf("a stream window raised past the limit: %v, want RST_STREAM FLOW_CONTROL_ERROR on stream 1", f)
	}
	eventually(t, "the reset stream's guard released", func() bool { return w.load() == 0 })
	if err := c.fr.WriteWindowUpdate(0, maxWindow); err != nil {
		t.Fatal(err)
	}
	f = c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if f == nil || f.(*http2.GoAwayFrame).ErrCode != http2.ErrCodeFlowControl {
		t.Fatalf("the connection's window raised past the limit: %v, want GOAWAY FLOW_CONTROL_ERROR", f)
	}
}

// The server never raises SETTINGS_MAX_FRAME_SIZE from its initial 16,384
// bytes: a frame up to that size is read, a larger one ends the connection
// with FRAME_SIZE_ERROR before its payload is read (no buffer of the
// frame's size is made for it).
func TestDirectFramesOverTheMaxFrameSizeEndTheConnection(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{})
	frame := func(n int) []byte { // of an unknown type, which the server ignores
		return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), 0xfe, 0, 0, 0, 0, 0}, make([]byte, n)...)
	}
	c := dialRaw(t, w.addr)
	if _, err := c.nc.Write(frame(initialMaxFrame)); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	if f := c.readUntil(func(f http2.Frame) bool {
		_, goAway := f.(*http2.GoAwayFrame)
		p, ok := f.(*http2.PingFrame)
		return goAway || ok && p.IsAck()
	}); f.Header().Type != http2.FramePing {
		t.Fatalf("a frame of the largest size allowed was answered with %v", f)
	}
	if _, err := c.nc.Write(frame(initialMaxFrame + 1)); err != nil {
		t.Fatal(err)
	}
	f := c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if f == nil || f.(*http2.GoAwayFrame).ErrCode != http2.ErrCodeFrameSize {
		t.Fatalf("a frame over the largest size: %v, want GOAWAY FRAME_SIZE_ERROR", f)
	}
}

// A stream whose exchange ended while its last replies waited for window,
// and which the gateway then reset, is closed for the gateway: it leaves
// the connection's streams, so that it holds no place under the stream cap
// and a graceful stop does not wait for it.
func TestDirectAStreamResetWhileItsRepliesWaitIsForgotten(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{MaxConcurrentStreams: 1})
	c := dialRaw(t, w.addr)
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	body := chatBody("m", "replies held back by the window")
	c.open(1)
	c.send(1, reqHeaders("/v1/chat/completions", len(body)))
	c.send(1, reqBody(body, true))
	eventually(t, "the request routed", func() bool { return w.load() == 1 })
	if err := c.fr.WriteData(1, true, nil); err != nil { // the gateway closes its side: the exchange ends
		t.Fatal(err)
	}
	eventually(t, "the ended exchange's guard released", func() bool { return w.load() == 0 })
	if err := c.fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	c.open(3)
	c.send(3, reqHeaders("/v1/chat/completions", len(body)))
	c.send(3, reqBody(body, true))
	f := c.readUntil(func(f http2.Frame) bool {
		_, rst := f.(*http2.RSTStreamFrame)
		return f.Header().StreamID == 3 && (rst || f.Header().Type == http2.FrameHeaders)
	})
	if rst, ok := f.(*http2.RSTStreamFrame); ok {
		t.Fatalf("the next stream was refused (%v): the reset one still held the only place", rst.ErrCode)
	}
	eventually(t, "the reset stream forgotten", func() bool {
		w.ds.mu.Lock()
		defer w.ds.mu.Unlock()
		for dc := range w.ds.conns {
			dc.mu.Lock()
			_, held := dc.streams[1]
			blocked := len(dc.blocked)
			dc.mu.Unlock()
			if held || blocked > 1 {
				return false
			}
		}
		return true
	})
}

// A gateway that sends past a waiting stream's window, ignoring flow
// control, loses that stream: it is reset with FLOW_CONTROL_ERROR, leaves
// the admission queue and holds nothing.
func TestDirectStreamSentPastItsWindowIsReset(t *testing.T) {
	e, q, first, c := waitingRawStream(t, DirectOptions{})
	chunk := reqBody(strings.Repeat("x", 16000), false) // one frame each
	for range streamWindow/16000 + 2 {
		c.send(1, chunk)
	}
	rst := c.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok })
	if rst == nil || rst.Header().StreamID != 1 || rst.(*http2.RSTStreamFrame).ErrCode != http2.ErrCodeFlowControl {
		t.Fatalf("stream ended with %v (%v), want RST_STREAM FLOW_CONTROL_ERROR on stream 1", rst, rstCode(rst))
	}
	eventually(t, "the reset request left the queue", func() bool { return q.Len() == 0 })
	if p, _ := e.worker("127.0.0.1:8000").Load(); p != 1 {
		t.Fatalf("load %d, want 1: only the first request holds a guard", p)
	}
	first.responseHeaders(200, "application/json", true, "")
	first.recv()
	eventually(t, "every guard released", func() bool { p, d := e.worker("127.0.0.1:8000").Load(); return p+d == 0 })
}

// Messages larger than the window are credited as they arrive, so a
// gateway could queue many of them behind a waiting request: the stream
// is reset (ENHANCE_YOUR_CALM) once it holds more than a window and one
// such message, and its request leaves the queue holding nothing.
func TestDirectWaitingStreamQueuesABoundedAmount(t *testing.T) {
	e, q, _, c := waitingRawStream(t, DirectOptions{MaxRecvMsgSize: 2 << 20})
	go func() { _, _ = io.Copy(io.Discard, c.nc) }()  // window updates and the answer, unread
	big := reqBody(strings.Repeat("x", 3<<19), false) // 1.5 MiB, past the stream window
	for range 3 {
		c.send(1, big)
	}
	eventually(t, "the over-full stream left the queue", func() bool { return q.Len() == 0 })
	if p, _ := e.worker("127.0.0.1:8000").Load(); p != 1 {
		t.Fatalf("load %d, want 1: only the first request holds a guard", p)
	}
}

// waitingRawStream serves a one-slot queue's server directly with opts,
// fills the slot with a routed request (first) and has a raw client's
// request on stream 1 wait in the queue behind it.
func waitingRawStream(t *testing.T, opts DirectOptions) (*env, *flowcontrol.Queue, *session, *rawClient) {
	t.Helper()
	e, q, _ := queueEnv(t, flowcontrol.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ds := NewDirect(e.server, opts)
	go func() { _ = ds.Serve(lis) }()
	t.Cleanup(ds.Stop)

	first := e.open()
	first.sendRequest("interactive")
	first.routed(true)

	c := dialRaw(t, lis.Addr().String())
	c.open(1)
	body := chatBody("m", "waits for capacity")
	c.send(1, reqHeaders("/v1/chat/completions", len(body)))
	c.send(1, reqBody(body, true))
	eventually(t, "the raw client's request queued", func() bool { return q.Len() == 1 })
	return e, q, first, c
}

// rstCode is the error code of a RST_STREAM frame, for a failure message.
func rstCode(f http2.Frame) any {
	if r, ok := f.(*http2.RSTStreamFrame); ok {
		return r.ErrCode
	}
	return nil
}

// A gateway's gRPC health checker may probe the ext_proc port itself: Check
// answers the checker's status for each service name, an unknown name is
// NOT_FOUND, Watch is not served, and ext_proc streams on the same
// connection go on.
func TestDirectAnswersHealthChecks(t *testing.T) {
	statuses := map[string]healthpb.HealthCheckResponse_ServingStatus{
		"": healthpb.HealthCheckResponse_SERVING,
		"envoy.service.ext_proc.v3.ExternalProcessor": healthpb.HealthCheckResponse_NOT_SERVING,
	}
	w := newDirectWorld(t, DirectOptions{Health: func(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		st, ok := statuses[service]
		if !ok {
			return 0, status.Error(codes.NotFound, "unknown service")
		}
		return st, nil
	}})
	conn, err := grpc.NewClient(w.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	for service, want := range statuses {
		resp, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil || resp.GetStatus() != want {
			t.Errorf("Check(%q) = %v, %v; want %v", service, resp.GetStatus(), err, want)
		}
	}
	if _, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "other"}); status.Code(err) != codes.NotFound {
		t.Errorf("Check of an unknown service: %v, want NotFound", err)
	}
	watch, err := hc.Watch(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := watch.Recv(); status.Code(err) != codes.Unimplemented {
		t.Errorf("Watch: %v, want Unimplemented", err)
	}
	st := routeOne(t, extprocv3.NewExternalProcessorClient(conn), chatBody("m", "routed beside the checks"))
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want EOF", err)
	}
}

// Without a checker the health service is not served on the ext_proc port.
func TestDirectWithoutHealthChecker(t *testing.T) {
	w := newDirectWorld(t, DirectOptions{})
	conn, err := grpc.NewClient(w.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("Check: %v, want Unimplemented", err)
	}
}

// A gateway resets a stream (its client went away) on the connection's
// reader goroutine at the moment the stream's own goroutine first asks for
// its context's Done channel, as a request entering the flow-control queue
// does. The channel must be closed once: a second close would panic on the
// reader goroutine and end the picker.
func TestDirectResetAsARequestStartsWaitingClosesItsContextOnce(t *testing.T) {
	for range 20000 {
		st := &directStream{}
		reset := make(chan struct{})
		go func() {
			defer close(reset)
			st.cancel()
		}()
		<-st.Context().Done()
		<-reset
		if err := st.Context().Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("context error %v after the reset, want context.Canceled", err)
		}
	}
}
