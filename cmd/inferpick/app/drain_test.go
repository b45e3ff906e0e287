package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// TestRoutingStopsItsDependenciesAfterTheServer: the dependencies run on
// through the server's drain and are ended once it returns; a dependency
// that fails ends the server and the others too.
func TestRoutingStopsItsDependenciesAfterTheServer(t *testing.T) {
	t.Run("drain", func(t *testing.T) {
		draining, drained := make(chan struct{}), make(chan struct{})
		depStopped := make(chan struct{})
		depCtx := make(chan context.Context, 1)
		server := manager.RunnableFunc(func(ctx context.Context) error {
			<-ctx.Done()
			close(draining)
			<-drained
			return nil
		})
		dep := manager.RunnableFunc(func(ctx context.Context) error {
			depCtx <- ctx
			<-ctx.Done()
			close(depStopped)
			return nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- (&routing{server: server, deps: []manager.Runnable{dep}}).Start(ctx) }()
		cancel()
		<-draining
		if err := (<-depCtx).Err(); err != nil {
			t.Fatalf("dependency's context ended while the server drained: %v", err)
		}
		close(drained)
		<-depStopped
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("failure", func(t *testing.T) {
		boom := errors.New("boom")
		server := manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); return nil })
		failing := manager.RunnableFunc(func(context.Context) error { return boom })
		other := manager.RunnableFunc(func(ctx context.Context) error { <-ctx.Done(); return nil })
		err := (&routing{server: server, deps: []manager.Runnable{failing, other}}).Start(t.Context())
		if !errors.Is(err, boom) {
			t.Fatalf("Start: %v, want %v", err, boom)
		}
	})
}

// TestQueuedRequestIsRoutedDuringTheDrain: with --flow-control, a request
// waiting in the queue at SIGTERM is routed once the request in flight ends
// within --drain-timeout; the queue runs until the ext_proc server has
// drained, where it used to stop with the run and answer every waiter 429
// "flow control queue stopped" at once.
func TestQueuedRequestIsRoutedDuringTheDrain(t *testing.T) {
	o := staticOptions(t, "--static-endpoints", "127.0.0.1:1", "--flow-control",
		"--config-text", "policy:\n  name: least-load\n  maxInFlight: 1\n", "--drain-timeout", "20s")
	q := queueBehindOne(t, o)

	q.stop()
	until(t, "not ready", func() bool {
		r, err := q.health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "readiness"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	// The request in flight ends, well within the drain.
	finishRequest(t, q.inFlight)
	q.expectRouted(t, " during the drain")
	if err := q.queued.CloseSend(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-q.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
}

// queuedPicker is a picker with one place (maxInFlight 1), a request
// routed there and a second waiting in its queue.
type queuedPicker struct {
	health           healthpb.HealthClient
	inFlight, queued extprocv3.ExternalProcessor_ProcessClient
	replies          chan *extprocv3.ProcessingResponse // the queued request's first reply
	done             chan error                         // Run's return
	stop             context.CancelFunc                 // ends the run
}

// queueBehindOne runs the picker of o until q.stop or the test's end,
// waits for it to be ready, routes one request and queues a second behind
// it.
func queueBehindOne(t *testing.T, o *Options) *queuedPicker {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	t.Cleanup(stop)
	q := &queuedPicker{replies: make(chan *extprocv3.ProcessingResponse, 1), done: make(chan error, 1), stop: stop}
	go func() { q.done <- Run(ctx, o) }()
	q.health = healthpb.NewHealthClient(dial(t, o.GRPCHealthPort))
	until(t, "readiness", func() bool {
		r, err := q.health.Check(t.Context(), &healthpb.HealthCheckRequest{Service: "readiness"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
	client := extprocv3.NewExternalProcessorClient(dial(t, o.GRPCPort))
	q.inFlight = openRequest(t, client)
	if r, err := q.inFlight.Recv(); err != nil || r.GetRequestHeaders() == nil {
		t.Fatalf("first request not routed: %v %v", r, err)
	}
	if _, err := q.inFlight.Recv(); err != nil { // the body
		t.Fatal(err)
	}
	q.queued = openRequest(t, client)
	go func() {
		r, err := q.queued.Recv()
		if err != nil {
			t.Errorf("queued request: %v", err)
		}
		q.replies <- r
	}()
	until(t, "a queued request", func() bool {
		return strings.Contains(scrapeMetrics(t, o.MetricsPort), `inferpick_flowcontrol_queue_length{priority="0"} 1`)
	})
	return q
}

// expectRouted fails the test unless the queued request is routed; when
// says when, for the message.
func (q *queuedPicker) expectRouted(t *testing.T, when string) {
	t.Helper()
	select {
	case r := <-q.replies:
		if ir := r.GetImmediateResponse(); ir != nil {
			t.Fatalf("queued request answered %v (%s)%s, want it routed", ir.GetStatus().GetCode(), ir.GetBody(), when)
		}
		if r.GetRequestHeaders() == nil {
			t.Fatalf("queued request: unexpected reply %v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("queued request never answered")
	}
}

// finishRequest answers the routed request on s with a 200 response that
// ends its stream, reads the reply and closes the stream's sending side;
// the stream must not have been cut.
func finishRequest(t *testing.T, s extprocv3.ExternalProcessor_ProcessClient) {
	t.Helper()
	if err := s.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}}}, EndOfStream: true},
	}}); err != nil {
		t.Fatalf("in-flight stream cut: %v", err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatalf("in-flight stream cut: %v", err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
}

// openRequest sends a routed completion's headers, with the extra ones
// (name, value pairs), and body on a new stream.
func openRequest(t *testing.T, client extprocv3.ExternalProcessorClient, headers ...string) extprocv3.ExternalProcessor_ProcessClient {
	t.Helper()
	s, err := client.Process(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hdrs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}}
	for i := 0; i+1 < len(headers); i += 2 {
		hdrs.Headers = append(hdrs.Headers, &corev3.HeaderValue{Key: headers[i], RawValue: []byte(headers[i+1])})
	}
	for _, r := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hdrs}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(`{"model":"m","prompt":"hello"}`), EndOfStream: true}}},
	} {
		if err := s.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// TestUpstreamFlowControlSwitchQueues: upstream's switch for its
// flow-control layer (here the environment variable its chart sets; the
// config file's feature gate takes the same path, and an
// EndpointPickerConfig cannot cap in-flight requests to saturate a static
// endpoint) puts the queue in the request path: a request that finds the
// endpoint saturated waits and is routed once the one in flight ends,
// where it used to stop the picker at start.
func TestUpstreamFlowControlSwitchQueues(t *testing.T) {
	t.Setenv("ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER", "true")
	o := staticOptions(t, "--static-endpoints", "127.0.0.1:1", "--config-text", "policy:\n  name: least-load\n  maxInFlight: 1\n")
	q := queueBehindOne(t, o)
	finishRequest(t, q.inFlight)
	q.expectRouted(t, "")
	_ = q.queued.CloseSend()
}
