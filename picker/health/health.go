// Package health serves the picker's gRPC health services: liveness,
// readiness, and the ext_proc service name gateways probe.
package health

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Service names answered by the health server.
const (
	Liveness  = "liveness"
	Readiness = "readiness"
	ExtProc   = "envoy.service.ext_proc.v3.ExternalProcessor"
	// InferenceExtension is the name the upstream endpoint picker's probes
	// ask for; it means the same as Readiness.
	InferenceExtension = "inference-extension"
)

// Checker keeps the health statuses current. Liveness is SERVING while the
// process runs; readiness, inference-extension, the ext_proc name and the
// empty (overall) name are SERVING while ready() holds.
type Checker struct {
	srv      *health.Server
	ready    func() bool
	interval time.Duration

	// mu orders a tick's status write after any Drain: without it a tick
	// that read "not draining" could write SERVING after Drain's
	// NOT_SERVING and undo it until the next tick.
	mu       sync.Mutex
	draining bool
}

// New returns a checker; interval is how often ready is evaluated.
func New(ready func() bool, interval time.Duration) *Checker {
	c := &Checker{srv: health.NewServer(), ready: ready, interval: interval}
	c.srv.SetServingStatus(Liveness, healthpb.HealthCheckResponse_SERVING)
	c.set(false)
	return c
}

// Register adds the health service to s.
func (c *Checker) Register(s *grpc.Server) { healthpb.RegisterHealthServer(s, c.srv) }

// RegisterCheck adds the health service's Check alone to s, the ext_proc
// server: a Watch stream never ends on its own, and one held open there
// would keep a graceful stop waiting for its whole drain timeout.
func (c *Checker) RegisterCheck(s *grpc.Server) { healthpb.RegisterHealthServer(s, checkOnly{c: c}) }

// checkOnly serves Check; Watch and List answer Unimplemented.
type checkOnly struct {
	healthpb.UnimplementedHealthServer
	c *Checker
}

func (s checkOnly) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return s.c.srv.Check(ctx, req)
}

// Status is a service name's serving status as the health service answers
// it, or its gRPC NOT_FOUND error for a name it does not serve.
func (c *Checker) Status(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	resp, err := c.srv.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

func (c *Checker) set(ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	for _, name := range []string{"", Readiness, InferenceExtension, ExtProc} {
		c.srv.SetServingStatus(name, st)
	}
}

// Start evaluates readiness until ctx ends, then reports not ready so that
// gateways stop sending new streams while in-flight ones drain.
func (c *Checker) Start(ctx context.Context) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.tick()
		select {
		case <-ctx.Done():
			c.set(false)
			return nil
		case <-t.C:
		}
	}
}

// tick evaluates ready and writes the result unless Drain came first. ready
// runs outside the lock since it may be slow or itself lead to a Drain.
func (c *Checker) tick() {
	ready := c.ready()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.set(ready && !c.draining)
}

// Drain reports not ready from now on.
func (c *Checker) Drain() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.draining = true
	c.set(false)
}
