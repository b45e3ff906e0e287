package app

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/inferpick/inferpick/picker/extproc"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// collector is an OTLP trace collector on loopback that keeps what it gets.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string]string // span name → trace id (hex)
	ids   map[string]bool   // the request.id of each request span
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans[s.GetName()] = fmt.Sprintf("%x", s.GetTraceId())
				for _, a := range s.GetAttributes() {
					if a.GetKey() == "request.id" {
						c.ids[a.GetValue().GetStringValue()] = true
					}
				}
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// exported reports whether the span of the request with id arrived.
func (c *collector) exported(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids[id]
}

func (c *collector) trace(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spans[name]
}

// tracedPicker starts an OTLP collector, tracing as --tracing does with
// the collector in the environment (spans exported every batchDelay
// milliseconds), and an ext_proc server with the tracer over one worker;
// it returns the collector and a client of the server.
func tracedPicker(t *testing.T, batchDelay string) (*collector, extprocv3.ExternalProcessorClient) {
	t.Helper()
	col := &collector{spans: map[string]string{}, ids: map[string]bool{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", batchDelay)

	tracer, stopTracing, err := startTracing(t.Context(), true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stopTracing(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("stop tracing: %v", err)
		}
	})
	reg := registry.New()
	reg.Replace([]registry.Endpoint{{Key: registry.Key{UID: "a", Port: 1}, Name: "a", Address: netip.MustParseAddrPort("127.0.0.1:1")}})
	pol, err := policy.Build(policy.Config{}, reg)
	if err != nil {
		t.Fatal(err)
	}
	ext := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(ext, extproc.New(reg, pol, extproc.Options{Tracer: tracer}))
	extLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ext.Serve(extLis) }()
	t.Cleanup(ext.Stop)
	return col, extprocv3.NewExternalProcessorClient(dial(t, extLis.Addr().(*net.TCPAddr).Port))
}

// tracedRequest sends one completion with the extra request headers
// (name, value pairs) and a 200 response through c, reading every reply.
func tracedRequest(t *testing.T, c extprocv3.ExternalProcessorClient, headers ...string) {
	t.Helper()
	stream := openRequest(t, c, headers...)
	for range 2 { // route reply, body
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	finishRequest(t, stream)
}

// TestTracingExportsOverOTLP starts tracing as --tracing does, with the OTLP
// endpoint in the environment, and serves ext_proc with its tracer: a
// request's spans reach the collector in the trace the request's
// traceparent named.
func TestTracingExportsOverOTLP(t *testing.T) {
	col, client := tracedPicker(t, "10")
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	tracedRequest(t, client, "traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
	until(t, "both spans at the collector", func() bool {
		return col.trace("inferpick.request") != "" && col.trace("inferpick.pick") != ""
	})
	for _, name := range []string{"inferpick.request", "inferpick.pick"} {
		if got := col.trace(name); got != traceID {
			t.Errorf("span %s in trace %s, want the request's %s", name, got, traceID)
		}
	}
}

// TestSpansOfARequestIDThatIsNotUTF8AreExported sends a request whose
// x-request-id is not UTF-8 beside one whose id is, in one export batch
// (as a rule: each span must arrive either way):
// OTLP strings must be UTF-8, and a batch the exporter cannot encode loses
// every span in it.
func TestSpansOfARequestIDThatIsNotUTF8AreExported(t *testing.T) {
	col, client := tracedPicker(t, "300") // both requests in one batch
	tracedRequest(t, client, "x-request-id", "good-request")
	tracedRequest(t, client, "x-request-id", "bad-\xff-request")
	until(t, "both requests' spans exported", func() bool {
		return col.exported("good-request") && col.exported("bad-\uFFFD-request")
	})
}
