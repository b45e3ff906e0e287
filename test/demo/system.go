package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// system is everything one demo run starts, and the way to stop it again.
type system struct {
	c  config
	hc *http.Client

	cluster  *cluster
	podNames []string
	sims     []*process
	simAddrs []netip.AddrPort

	picker      *process
	grpcAddr    string
	healthAddr  string
	metricsAddr string

	gw       *gateway.Gateway
	gwAddr   string
	gwCancel context.CancelFunc
	gwDone   chan error
	served   servedLog
}

func newSystem(c config) *system {
	return &system{c: c, hc: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
}

// step prints what is starting, runs f and prints how long it took.
func (s *system) step(what string, f func() error) error {
	fmt.Fprintf(s.c.Out, "==> %s ... ", what)
	start := time.Now()
	if err := f(); err != nil {
		fmt.Fprintln(s.c.Out, "failed")
		return err
	}
	fmt.Fprintf(s.c.Out, "ok (%s)\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (s *system) logPath(name string) string { return filepath.Join(s.c.WorkDir, "logs", name+".log") }

// start brings the whole system up, stopping at the first failure; stop
// tears down whatever was started.
func (s *system) start(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(s.c.WorkDir, "logs"), 0o755); err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	if err := s.step("starting kube-apiserver and etcd (envtest)", func() (err error) {
		s.cluster, err = startCluster(s.c)
		return err
	}); err != nil {
		return err
	}
	ports, err := framework.FreeAddrs("127.0.0.1", 3)
	if err != nil {
		return err
	}
	s.grpcAddr, s.healthAddr, s.metricsAddr = ports[0], ports[1], ports[2]
	_, grpcPort, _ := net.SplitHostPort(s.grpcAddr)
	pickerPort, _ := strconv.Atoi(grpcPort)

	ips := s.c.podIPs()
	if err := s.step(fmt.Sprintf("creating InferencePool %s/%s and %d Ready pods (as a kubelet would)", namespace, poolName, len(ips)), func() (err error) {
		if err := s.cluster.createPool(ctx, s.c.Port, pickerPort); err != nil {
			return err
		}
		s.podNames, err = s.cluster.createPods(ctx, ips)
		return err
	}); err != nil {
		return err
	}
	if err := s.step(fmt.Sprintf("starting %d vllm-sim model servers on %s..%s:%d", len(ips), ips[0], ips[len(ips)-1], s.c.Port), func() error {
		return s.startSims(ctx, ips)
	}); err != nil {
		return err
	}
	if err := s.step("starting inferpick against the API server and waiting for it to sync", func() error {
		return s.startPicker(ctx)
	}); err != nil {
		return err
	}
	return s.step("starting the gateway (Envoy ext_proc stand-in)", s.startGateway)
}

func (s *system) startSims(ctx context.Context, ips []netip.Addr) error {
	bin := filepath.Join(s.c.BinDir, "vllm-sim")
	for i, ip := range ips {
		p, err := startProcess(ctx, s.podNames[i], s.logPath("vllm-sim-"+s.podNames[i]), "vllm-sim listening on", s.c.StartDeadline,
			bin, "--host", ip.String(), "--port", strconv.Itoa(s.c.Port),
			"--num-gpu-blocks", strconv.Itoa(s.c.KVBlocks),
			"--time-scale", strconv.FormatFloat(s.c.TimeScale, 'g', -1, 64),
			"--seed", strconv.Itoa(i+1))
		if err != nil {
			return err
		}
		s.sims = append(s.sims, p)
		s.simAddrs = append(s.simAddrs, netip.AddrPortFrom(ip, uint16(s.c.Port)))
	}
	return nil
}

func (s *system) startPicker(ctx context.Context) error {
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	args := []string{
		filepath.Join(s.c.BinDir, "inferpick"),
		"--kubeconfig", s.cluster.kubeconfig,
		"--pool-name", poolName, "--pool-namespace", namespace,
		"--bind-address", "127.0.0.1",
		"--grpc-port", port(s.grpcAddr),
		"--grpc-health-port", port(s.healthAddr),
		"--metrics-port", port(s.metricsAddr),
		"--metrics-endpoint-auth=false",
		"--drain-timeout", "5s",
	}
	if s.c.Policy != "" {
		args = append(args, "--policy", s.c.Policy)
	}
	p, err := startProcess(ctx, "inferpick", s.logPath("inferpick"), "", s.c.StartDeadline, args...)
	if err != nil {
		return err
	}
	s.picker = p
	if err := waitSynced(ctx, s.hc, s.metricsAddr, len(s.podNames), p.exited, s.c.StartDeadline); err != nil {
		return fmt.Errorf("%w; see %s", err, s.logPath("inferpick"))
	}
	return nil
}

func (s *system) startGateway() error {
	tlsCfg, err := gateway.TLSConfig("", true) // inferpick serves a self-signed certificate
	if err != nil {
		return err
	}
	s.gw, err = gateway.New(s.grpcAddr,
		gateway.WithPickerTLS(tlsCfg),
		gateway.WithMessageTimeout(0), // as Envoy in FULL_DUPLEX_STREAMED mode
		gateway.WithRecorder(s.served.record),
	)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	lis, err := net.Listen("tcp", s.c.GatewayAddr)
	if errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(s.c.GatewayAddr)
		lis, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return fmt.Errorf("gateway: listen: %w", err)
	}
	s.gwAddr = lis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	s.gwCancel, s.gwDone = cancel, make(chan error, 1)
	go func() { s.gwDone <- s.gw.Serve(ctx, lis) }()
	return nil
}

// stop tears down, in reverse order, whatever start brought up.
func (s *system) stop() error {
	var errs []error
	if s.gw != nil {
		s.gwCancel()
		errs = append(errs, <-s.gwDone, s.gw.Close())
	}
	if s.picker != nil {
		errs = append(errs, s.picker.Stop(10*time.Second))
	}
	var wg sync.WaitGroup
	simErrs := make([]error, len(s.sims))
	for i, p := range s.sims {
		wg.Go(func() { simErrs[i] = p.Stop(10 * time.Second) })
	}
	wg.Wait()
	errs = append(errs, simErrs...)
	if s.cluster != nil {
		errs = append(errs, s.cluster.stop())
	}
	return errors.Join(errs...)
}

// servedLog remembers which endpoint served each planned request, from the
// gateway's records.
type servedLog struct {
	mu   sync.Mutex
	byID map[int]string
}

func (l *servedLog) record(r gateway.Record) {
	id, ok := requestID(r.Path)
	if !ok || r.Served == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byID == nil {
		l.byID = make(map[int]string)
	}
	l.byID[id] = r.Served
}

func (l *servedLog) snapshot() map[int]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int]string, len(l.byID))
	for id, ep := range l.byID {
		out[id] = ep
	}
	return out
}
