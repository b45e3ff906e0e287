package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"
)

// The ext_proc service is an Envoy cluster: the gRPC service of the filter
// names a cluster whose hosts are the picker replicas. Each request opens
// its own stream, on a host chosen round robin among those not ejected.
// Passive outlier detection ejects a host after Consecutive failures in a
// row (a stream that cannot be opened, or that breaks with a transport
// error) for Ejection; when every host is ejected all of them are used, as
// Envoy does under its panic threshold. A stream that cannot be opened has
// sent nothing, so with Retry it is retried on the next host, each host at
// most once and the ejected ones last (the GrpcService retry policy,
// retrying on connect failures); when no host takes it the failure mode
// applies. Like Envoy's connection pools, a host that comes back is
// reconnected to at the next stream, not after a growing backoff. A stream that breaks after
// messages were sent is never retried: its request takes the failure mode.
//
// With a HealthCheck, the cluster also checks each host actively, as
// Envoy's gRPC health checker does and as a Kubernetes Service lists only
// ready pods: a host whose health service does not answer SERVING (not yet
// ready after a start, draining before a stop) takes no stream while
// another host does, and is used, as an ejected host is, only when none is
// healthy. A host counts as unhealthy until its first check passes.

// PickerCluster is the outlier detection and retry of the ext_proc cluster.
type PickerCluster struct {
	// Consecutive failures that eject a host; Envoy's default is 5.
	Consecutive int
	// Ejection is how long an ejected host is left out; Envoy's base
	// ejection time is 30 s.
	Ejection time.Duration
	// Retry retries a stream that could not be opened on another host.
	Retry bool
	// HealthCheck, when set, checks every host actively.
	HealthCheck *HealthCheck
}

// HealthCheck is the active health checking of the ext_proc cluster.
type HealthCheck struct {
	// Addrs are the hosts' gRPC health addresses, one for each picker
	// address and in the same order.
	Addrs []string
	// Service is the service name each check asks about.
	Service string
	// Interval is the time between two checks of a host.
	Interval time.Duration
	// Timeout is how long a check may take before it fails, as Envoy's
	// health check timeout; zero is DefaultHealthCheckTimeout. A check
	// bounded by a short interval instead would fail on a loaded host whose
	// health service answers SERVING a few milliseconds late.
	Timeout time.Duration
}

// DefaultHealthCheckTimeout is a health check's timeout when none is set.
const DefaultHealthCheckTimeout = time.Second

// DefaultPickerCluster is Envoy's outlier-detection defaults, with retry on
// connect failures.
var DefaultPickerCluster = PickerCluster{Consecutive: 5, Ejection: 30 * time.Second, Retry: true}

// WithPickerCluster sets the outlier detection and retry of the ext_proc
// cluster.
func WithPickerCluster(c PickerCluster) Option { return func(o *options) { o.cluster = c } }

// pickerHost is one picker replica of the cluster.
type pickerHost struct {
	addr   string
	conn   *grpc.ClientConn
	client extprocv3.ExternalProcessorClient

	mu           sync.Mutex
	failures     int // consecutive
	ejectedUntil time.Time

	streams atomic.Int64

	health    *grpc.ClientConn // nil without a health check
	unhealthy atomic.Bool
}

// pickers is the ext_proc cluster.
type pickers struct {
	hosts []*pickerHost
	cfg   PickerCluster
	now   func() time.Time
	next  atomic.Uint64
	c     *counters

	stopChecks func() // nil without a health check
	checks     sync.WaitGroup
}

// open opens a stream on the next host; see the comment at the top.
func (ps *pickers) open(ctx context.Context) (extprocv3.ExternalProcessor_ProcessClient, *pickerHost, error) {
	order := ps.order()
	var errs []error
	for i, h := range order {
		if i > 0 && !ps.cfg.Retry {
			break
		}
		stream, err := h.client.Process(ctx)
		if err == nil {
			h.streams.Add(1)
			return stream, h, nil
		}
		if ctx.Err() != nil {
			return nil, nil, err
		}
		ps.failed(h, err)
		errs = append(errs, fmt.Errorf("%s: %w", h.addr, err))
	}
	return nil, nil, errors.Join(errs...)
}

// order lists the hosts to try, starting at the next host in turn: the
// healthy ones, then the ejected and the unhealthy ones as a last resort
// (all of them when none is healthy, as Envoy's panic threshold does).
func (ps *pickers) order() []*pickerHost {
	start := int(ps.next.Add(1) - 1)
	now := ps.now()
	out := make([]*pickerHost, 0, len(ps.hosts))
	var rest []*pickerHost
	for i := range ps.hosts {
		h := ps.hosts[(start+i)%len(ps.hosts)]
		if h.unhealthy.Load() || h.ejected(now) {
			rest = append(rest, h)
		} else {
			out = append(out, h)
		}
	}
	return append(out, rest...)
}

// startChecks dials every host's health address and checks it every
// interval until close.
func (ps *pickers) startChecks(hc *HealthCheck, clk clock.WithTicker, opts ...grpc.DialOption) error {
	if len(hc.Addrs) != len(ps.hosts) {
		return fmt.Errorf("health check: %d addresses for %d pickers", len(hc.Addrs), len(ps.hosts))
	}
	if hc.Interval <= 0 {
		return fmt.Errorf("health check: interval %v: must be positive", hc.Interval)
	}
	if hc.Timeout < 0 {
		return fmt.Errorf("health check: timeout %v: must not be negative", hc.Timeout)
	}
	for i, h := range ps.hosts {
		conn, err := grpc.NewClient(hc.Addrs[i], opts...)
		if err != nil {
			return fmt.Errorf("health check client %s: %w", hc.Addrs[i], err)
		}
		h.health = conn
		h.unhealthy.Store(true)
	}
	stop := make(chan struct{})
	ps.stopChecks = func() { close(stop) }
	for _, h := range ps.hosts {
		ps.checks.Go(func() { h.check(stop, hc, clk) })
	}
	return nil
}

// check asks h's health service about hc.Service at once, then every
// interval, until stop closes.
func (h *pickerHost) check(stop <-chan struct{}, hc *HealthCheck, clk clock.WithTicker) {
	client := healthpb.NewHealthClient(h.health)
	timeout := cmp.Or(hc.Timeout, DefaultHealthCheckTimeout)
	t := clk.NewTicker(hc.Interval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: hc.Service})
		cancel()
		h.unhealthy.Store(err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING)
		select {
		case <-stop:
			return
		case <-t.C():
		}
	}
}

func (h *pickerHost) ejected(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return now.Before(h.ejectedUntil)
}

// failed counts a failure of h: a stream that could not be opened or broke
// with a transport error.
func (ps *pickers) failed(h *pickerHost, err error) {
	if !transportFailure(err) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures++
	if h.failures >= max(ps.cfg.Consecutive, 1) {
		h.failures = 0
		h.ejectedUntil = ps.now().Add(ps.cfg.Ejection)
		ps.c.ejections.Add(1)
	}
}

// succeeded resets h's run of failures.
func (ps *pickers) succeeded(h *pickerHost) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failures = 0
}

// transportFailure reports whether err says the host is unreachable, went
// away or stopped answering, rather than that the picker answered with an
// error.
func transportFailure(err error) bool {
	return status.Code(err) == codes.Unavailable || errors.Is(err, ErrMessageTimeout)
}

func (ps *pickers) close() error {
	if ps.stopChecks != nil {
		ps.stopChecks()
		ps.checks.Wait()
	}
	var errs []error
	for _, h := range ps.hosts {
		if err := h.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close picker connection %s: %w", h.addr, err))
		}
		if h.health != nil {
			if err := h.health.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close health connection %s: %w", h.addr, err))
			}
		}
	}
	return errors.Join(errs...)
}

// PickersHealthy returns, for each picker address, whether its last health
// check passed; every address is healthy without a health check.
func (g *Gateway) PickersHealthy() map[string]bool {
	out := make(map[string]bool, len(g.pickers.hosts))
	for _, h := range g.pickers.hosts {
		out[h.addr] = !h.unhealthy.Load()
	}
	return out
}

// PickerStreams returns how many ext_proc streams each picker address took.
func (g *Gateway) PickerStreams() map[string]int64 {
	out := make(map[string]int64, len(g.pickers.hosts))
	for _, h := range g.pickers.hosts {
		out[h.addr] = h.streams.Load()
	}
	return out
}
