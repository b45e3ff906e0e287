package app

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/inferpick/inferpick/picker/extproc"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// relay forwards TCP connections on loopback to target until frozen: then
// it stops moving bytes either way while keeping both sockets open, as a
// half-open connection through a dead node does.
type relay struct {
	lis    net.Listener
	target string
	frozen chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{lis: lis, target: target, frozen: make(chan struct{})}
	r.wg.Go(r.serve)
	t.Cleanup(func() {
		r.freeze()
		_ = lis.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			_ = c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *relay) freeze() { r.once.Do(func() { close(r.frozen) }) }

func (r *relay) serve() {
	for {
		in, err := r.lis.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", r.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, in, out)
		r.mu.Unlock()
		r.wg.Go(func() { r.pipe(out, in) })
		r.wg.Go(func() { r.pipe(in, out) })
	}
}

// pipe copies src to dst until the relay is frozen or a side closes.
func (r *relay) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		select {
		case <-r.frozen:
			return // leave both sockets open and silent
		default:
		}
		_ = src.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-r.frozen:
				return
			default:
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil && !isTimeout(err) {
			return // a side closed
		}
	}
}

// TestKeepaliveReleasesASilentGateway routes a request through a TCP relay,
// freezes the relay, and checks that the server's keepalive notices the
// dead connection and the request's load goes back to zero.
func TestKeepaliveReleasesASilentGateway(t *testing.T) {
	o, err := parse(t, "--static-endpoints", "127.0.0.1:1", "--secure-serving=false",
		"--grpc-keepalive-time", "200ms", "--grpc-keepalive-timeout", "200ms")
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New()
	reg.Replace([]registry.Endpoint{{Key: registry.Key{UID: "a", Port: 1}, Name: "a", Address: netip.MustParseAddrPort("127.0.0.1:1")}})
	pol, err := policy.Build(policy.Config{}, reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(extProcOptions(o)...)
	extprocv3.RegisterExternalProcessorServer(srv, extproc.New(reg, pol, extproc.Options{}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	r := newRelay(t, lis.Addr().String())

	stream, err := extprocv3.NewExternalProcessorClient(dial(t, r.lis.Addr().(*net.TCPAddr).Port)).Process(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hdrs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}}
	for _, m := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(`{"model":"m","prompt":"hi"}`), EndOfStream: true}}},
	} {
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	w := reg.Workers()[0]
	if p, _ := w.Load(); p != 1 {
		t.Fatalf("load %d after routing, want 1", p)
	}

	r.freeze()
	start := time.Now()
	until(t, "the silent connection's load released", func() bool {
		p, d := w.Load()
		return p == 0 && d == 0
	})
	t.Logf("released %s after the relay froze (keepalive 200ms + 200ms)", time.Since(start).Round(time.Millisecond))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
