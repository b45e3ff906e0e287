package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/inferpick/inferpick/picker/observe"
)

// PickerPackage is the picker's main package, for Binary.
const PickerPackage = "./cmd/inferpick"

// Picker is an inferpick process with its three ports on 127.0.0.1, plain
// gRPC and, unless its arguments say otherwise, plain HTTP metrics.
type Picker struct {
	*Process
	bin                               string
	args                              []string
	GRPCPort, HealthPort, MetricsPort int
}

// StartPickerT runs the picker binary bin with args added (mode flags such
// as --static-endpoints or --kubeconfig among them); the test's cleanup
// stops it.
func StartPickerT(t testing.TB, bin string, args ...string) *Picker {
	t.Helper()
	p := &Picker{bin: bin, args: args}
	for attempt := 1; ; attempt++ {
		ports, err := FreePorts("127.0.0.1", 3)
		if err != nil {
			t.Fatal(err)
		}
		p.GRPCPort, p.HealthPort, p.MetricsPort = ports[0], ports[1], ports[2]
		p.start(t)
		err = p.waitListening()
		if err == nil {
			return p
		}
		// A port free when chosen can be taken before the picker binds it
		// (by an outgoing connection's ephemeral port, most often): the
		// picker then exits saying so, and new ports are chosen.
		if attempt == startAttempts || !strings.Contains(p.Log(), "address already in use") {
			t.Fatalf("inferpick did not start: %v\n%s", err, p.Output())
		}
		t.Logf("inferpick: a chosen port was taken before it bound it (%v); choosing new ports", err)
	}
}

// startAttempts bounds how often StartPickerT chooses new ports.
const startAttempts = 5

// waitListening waits until the picker accepts connections on its three
// ports and answers health checks, or exits.
func (p *Picker) waitListening() error {
	return PollTimeout(Timeout, func() error {
		if p.Exited() {
			return Stop(p.exited())
		}
		for _, port := range []int{p.GRPCPort, p.MetricsPort} {
			conn, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
			if err != nil {
				return err
			}
			_ = conn.Close()
		}
		if !p.answersHealth() {
			return fmt.Errorf("no health answer on port %d", p.HealthPort)
		}
		if p.Exited() {
			return Stop(p.exited())
		}
		return nil
	})
}

// exited is the error of a picker that ended before it listened.
func (p *Picker) exited() error {
	if err := p.Err(); err != nil {
		return fmt.Errorf("it exited: %w", err)
	}
	return errors.New("it exited")
}

// answersHealth reports whether the health port answers a check at all
// (serving or not: a replica that is not ready still answers).
func (p *Picker) answersHealth() bool {
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(p.HealthPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err == nil
}

func (p *Picker) start(t testing.TB) {
	t.Helper()
	args := []string{
		"--bind-address", "127.0.0.1",
		"--grpc-port", strconv.Itoa(p.GRPCPort),
		"--grpc-health-port", strconv.Itoa(p.HealthPort),
		"--metrics-port", strconv.Itoa(p.MetricsPort),
		"--secure-serving=false",
		"--drain-timeout", "2s",
	}
	p.Process = StartT(t, Cmd{Name: "inferpick", Path: p.bin, Args: append(args, p.args...)})
}

// Restart stops the process (SIGKILL when kill) and starts a new one with
// the same flags and ports.
func (p *Picker) Restart(t testing.TB, kill bool) {
	t.Helper()
	if kill {
		p.Kill()
	} else if err := p.Stop(StopGrace); err != nil {
		t.Error(err)
	}
	p.start(t)
}

// Addr is the ext_proc address.
func (p *Picker) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.GRPCPort) }

// MetricsURL is the URL of path on the metrics port.
func (p *Picker) MetricsURL(path string) string {
	return "http://127.0.0.1:" + strconv.Itoa(p.MetricsPort) + path
}

// Workers reads /debug/workers.
func (p *Picker) Workers(ctx context.Context) (observe.WorkersView, error) {
	var v observe.WorkersView
	err := GetJSON(ctx, p.MetricsURL("/debug/workers"), &v)
	return v, err
}

// Metrics reads the Prometheus page of the metrics port.
func (p *Picker) Metrics(ctx context.Context) (Metrics, error) {
	return ScrapeMetrics(ctx, p.MetricsURL("/metrics"), nil)
}

// Serving asks the gRPC health service whether service is serving.
func (p *Picker) Serving(ctx context.Context, service string) bool {
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(p.HealthPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// WaitWorkers waits until the registry has synced and lists n workers that
// may be picked; parked workers (their pods unready) are not counted.
func (p *Picker) WaitWorkers(t testing.TB, n int) observe.WorkersView {
	t.Helper()
	var v observe.WorkersView
	Eventually(t, Timeout, "the picker's workers", func() error {
		var err error
		if v, err = p.Workers(context.Background()); err != nil {
			return err
		}
		if !v.Synced || v.Live() != n {
			return fmt.Errorf("synced=%v with %d workers (%d parked), want %d", v.Synced, v.Live(), len(v.Workers)-v.Live(), n)
		}
		return nil
	})
	return v
}

// WaitIdle waits until every worker's load, prefill and decode are 0 and
// returns how long that took.
func (p *Picker) WaitIdle(t testing.TB, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := WaitIdle(context.Background(), p.MetricsURL("/debug/workers"), timeout); err != nil {
		t.Fatalf("every worker idle: %v", err)
	}
	return time.Since(start)
}

// WaitIdle polls the picker's /debug/workers at url until every worker's
// load, prefill and decode are 0, ctx ends or timeout passes, and returns
// the last view it read, idle or not.
func WaitIdle(ctx context.Context, url string, timeout time.Duration) (observe.WorkersView, error) {
	var last observe.WorkersView
	err := Poll(ctx, timeout, func() error {
		var v observe.WorkersView
		if err := GetJSON(ctx, url, &v); err != nil {
			return err
		}
		last = v
		return Busy(v)
	})
	return last, err
}

// Busy names a worker of v that holds load, prefill or decode, or is nil
// when none does. It checks each count, not their sum, which a count gone
// negative would bring to zero, and parked workers as well: a request still
// counted on one is in flight too.
func Busy(v observe.WorkersView) error {
	for i := range v.Workers {
		if w := &v.Workers[i]; w.Load != 0 || w.Prefill != 0 || w.Decode != 0 {
			state := ""
			if w.Parked {
				state = " (parked)"
			}
			return fmt.Errorf("worker %s%s holds load %d (prefill %d, decode %d)", w.Address, state, w.Load, w.Prefill, w.Decode)
		}
	}
	return nil
}
