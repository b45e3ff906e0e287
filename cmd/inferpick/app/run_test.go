package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/inferpick/inferpick/test/framework"
)

func dial(t *testing.T, port int) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStaticRunServesAndDrains runs the picker as main does, without a
// cluster: it becomes ready, routes a request, and on shutdown reports not
// ready while the request in flight finishes, then exits. It serves ext_proc
// over grpc-go's transport, which nothing else runs through Run (the
// binary's tests, e2e and reliability, run the default direct one); Run
// registers its metrics once per process.
func TestStaticRunServesAndDrains(t *testing.T) {
	o := staticOptions(t, "--static-endpoints", "127.0.0.1:1,127.0.0.2:1", "--extproc-transport", transportGRPC, "--grpc-max-concurrent-streams", "8")
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()

	health := healthpb.NewHealthClient(dial(t, o.GRPCHealthPort))
	ready := func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run returned before it was ready: %v", err)
		default:
		}
		r, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "readiness"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}
	until(t, "readiness", ready)

	// A request is routed and stays in flight.
	stream := openRequest(t, extprocv3.NewExternalProcessorClient(dial(t, o.GRPCPort)))
	reply, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	dest := string(reply.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()[0].GetHeader().GetRawValue())
	if !strings.HasPrefix(dest, "127.0.0.") {
		t.Fatalf("destination %q is not one of the static endpoints", dest)
	}
	if _, err := stream.Recv(); err != nil { // the body
		t.Fatal(err)
	}
	if got := debugWorkers(t, o.MetricsPort); !strings.Contains(got, `"load": 1`) {
		t.Fatalf("/debug/workers does not show the request in flight:\n%s", got)
	}

	// SIGTERM: not ready at once, the stream in flight still completes,
	// and the drain can be watched on the metrics port.
	stop()
	until(t, "not ready", func() bool {
		r, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "readiness"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	// The health port answers through the drain: alive, not ready.
	if r, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "liveness"}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("liveness during the drain: %v, %v; want SERVING", r.GetStatus(), err)
	}
	if got := debugWorkers(t, o.MetricsPort); !strings.Contains(got, `"load": 1`) {
		t.Fatalf("/debug/workers during the drain does not show the request in flight:\n%s", got)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", o.MetricsPort))
	if err != nil {
		t.Fatalf("/metrics during the drain: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics during the drain: %s", resp.Status)
	}
	finishRequest(t, stream)
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v, want EOF", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
}

// staticOptions parses args after those of a picker without a cluster on
// loopback: plain gRPC, no scraping to speak of, free ports.
func staticOptions(t *testing.T, args ...string) *Options {
	t.Helper()
	o, err := parse(t, append([]string{"--bind-address", "127.0.0.1", "--secure-serving=false", "--refresh-metrics-interval", "1h",
		"--grpc-port", fmt.Sprint(framework.FreePortT(t)), "--grpc-health-port", fmt.Sprint(framework.FreePortT(t)),
		"--metrics-port", fmt.Sprint(framework.FreePortT(t))}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func debugWorkers(t *testing.T, port int) string { return getMetricsPort(t, port, "/debug/workers") }

func scrapeMetrics(t *testing.T, port int) string { return getMetricsPort(t, port, "/metrics") }

// getMetricsPort returns the body of path on the metrics port.
func getMetricsPort(t *testing.T, port int, path string) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTheExtProcPortAnswersHealthChecks runs the picker over each transport
// and probes its ext_proc port as a gateway's gRPC health checker on the
// ext_proc cluster does (the upstream picker's --health-checking): the
// names the health port answers, answered alike, and NOT_FOUND for others.
func TestTheExtProcPortAnswersHealthChecks(t *testing.T) {
	for _, transport := range []string{transportDirect, transportGRPC} {
		t.Run(transport, func(t *testing.T) {
			o := staticOptions(t, "--static-endpoints", "127.0.0.1:1", "--extproc-transport", transport)
			ctx, stop := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- Run(ctx, o) }()
			defer func() {
				stop()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()

			onExtProc := healthpb.NewHealthClient(dial(t, o.GRPCPort))
			onHealth := healthpb.NewHealthClient(dial(t, o.GRPCHealthPort))
			check := func(c healthpb.HealthClient, service string) (healthpb.HealthCheckResponse_ServingStatus, codes.Code) {
				r, err := c.Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
				return r.GetStatus(), status.Code(err)
			}
			until(t, "the ext_proc port reports ready", func() bool {
				st, code := check(onExtProc, "envoy.service.ext_proc.v3.ExternalProcessor")
				return code == codes.OK && st == healthpb.HealthCheckResponse_SERVING
			})
			for _, service := range []string{"", "liveness", "readiness", "inference-extension", "envoy.service.ext_proc.v3.ExternalProcessor", "no-such-service"} {
				gotSt, gotCode := check(onExtProc, service)
				wantSt, wantCode := check(onHealth, service)
				if gotSt != wantSt || gotCode != wantCode {
					t.Errorf("Check(%q) on the ext_proc port = %v, %v; on the health port %v, %v", service, gotSt, gotCode, wantSt, wantCode)
				}
			}
			if _, code := check(onExtProc, "no-such-service"); code != codes.NotFound {
				t.Errorf("Check of an unknown service: %v, want NotFound", code)
			}
			// A Watch stream never ends by itself: held open on the ext_proc
			// port it would keep the drain waiting for its whole timeout.
			watch, err := onExtProc.Watch(t.Context(), &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := watch.Recv(); status.Code(err) != codes.Unimplemented {
				t.Errorf("Watch on the ext_proc port: %v, want Unimplemented", err)
			}
		})
	}
}

// runReady runs the picker with o until the test ends (Run's error fails
// it), and returns once the picker reports ready.
func runReady(t *testing.T, o *Options) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	health := healthpb.NewHealthClient(dial(t, o.GRPCHealthPort))
	until(t, "readiness", func() bool {
		r, err := health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "readiness"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

// TestDisaggregationIsWiredToTheRoutes: the policy's disaggregation
// reaches the ext_proc server, which counts each routed request's split
// decision in llm-d's series: static endpoints carry no role, so none
// prefills for another and the request is decoded alone.
func TestDisaggregationIsWiredToTheRoutes(t *testing.T) {
	o := staticOptions(t, "--static-endpoints", "127.0.0.1:1", "--config-text", "policy: {disaggregation: {minUncachedTokens: 0}}")
	runReady(t, o)
	stream := openRequest(t, extprocv3.NewExternalProcessorClient(dial(t, o.GRPCPort)), "x-prefiller-host-port", "203.0.113.9:80")
	reply, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range reply.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-prefiller-host-port" {
			t.Errorf("the route names a prefill pod, %q, with no pod labelled to prefill", h.GetHeader().GetRawValue())
		}
	}
	if rm := reply.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !slices.Contains(rm, "x-prefiller-host-port") {
		t.Errorf("the route removes %v, not the client's x-prefiller-host-port", rm)
	}
	if _, err := stream.Recv(); err != nil { // the body
		t.Fatal(err)
	}
	want := `llm_d_inference_scheduler_disagg_decision_total{decision_type="decode-only",model_name="m"} 1`
	if got := scrapeMetrics(t, o.MetricsPort); !strings.Contains(got, want) {
		t.Errorf("/metrics lacks %s", want)
	}
	finishRequest(t, stream)
}
