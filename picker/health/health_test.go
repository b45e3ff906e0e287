package health

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func serve(t *testing.T, c *Checker) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	c.Register(s)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

func status(t *testing.T, hc healthpb.HealthClient, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	r, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		t.Fatalf("check %q: %v", service, err)
	}
	return r.GetStatus()
}

// waitFor polls service until it reports want, or fails at the deadline.
func waitFor(t *testing.T, hc healthpb.HealthClient, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for status(t, hc, service) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%q never became %v", service, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestReadinessFollowsSyncAndDrain(t *testing.T) {
	var synced atomic.Bool
	c := New(synced.Load, time.Millisecond)
	hc := serve(t, c)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()

	if got := status(t, hc, Liveness); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("liveness %v before sync, want SERVING", got)
	}
	for _, svc := range []string{Readiness, InferenceExtension, ExtProc, ""} {
		if got := status(t, hc, svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("%q %v before sync, want NOT_SERVING", svc, got)
		}
	}

	synced.Store(true)
	for _, svc := range []string{Readiness, InferenceExtension, ExtProc, ""} {
		waitFor(t, hc, svc, healthpb.HealthCheckResponse_SERVING)
	}

	c.Drain()
	for _, svc := range []string{Readiness, InferenceExtension} {
		if got := status(t, hc, svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("%q %v after Drain, want NOT_SERVING", svc, got)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := status(t, hc, ExtProc); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("ext_proc %v after stop, want NOT_SERVING", got)
	}
	if got := status(t, hc, Liveness); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("liveness %v after stop, want SERVING", got)
	}
}

// A Drain (SIGTERM, from the ext_proc runnable's goroutine) that lands while
// a tick is evaluating ready must not be undone by that tick's write: the
// gateway would read SERVING again until the next tick and keep sending new
// streams to a draining replica.
func TestDrainDuringATickStaysNotServing(t *testing.T) {
	var c *Checker
	c = New(func() bool {
		c.Drain() // lands while the tick evaluates
		return true
	}, time.Hour)
	c.tick()
	if got, err := c.Status(Readiness); err != nil || got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("readiness %v (%v) after a tick that a Drain interrupted, want NOT_SERVING", got, err)
	}
}
