package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// config is everything the demo run depends on. Flags set it; the
// environment variables a make user is most likely to reach for (KEEP,
// DEMO_REQUESTS, DEMO_POLICY, KUBEBUILDER_ASSETS) give the defaults.
type config struct {
	// ControlPlaneDir holds etcd and kube-apiserver (and kubectl).
	ControlPlaneDir string
	// BinDir holds the inferpick and vllm-sim binaries.
	BinDir string
	// WorkDir receives the kubeconfig and the processes' logs.
	WorkDir string
	// CRDDir holds the InferencePool CRD.
	CRDDir string

	// Pods is the number of model-server Pods; the first gets FirstIP, the
	// next ones the following addresses.
	Pods    int
	FirstIP netip.Addr
	Port    int
	// GatewayAddr is where the gateway stand-in listens; when it is busy a
	// free port on the same address is used.
	GatewayAddr string

	// Sim sizes the simulated model servers.
	KVBlocks  int
	TimeScale float64

	Workload workload
	// Policy, when set, is passed to inferpick's --policy.
	Policy string
	// Keep leaves everything running after the report until interrupted.
	Keep bool
	// Quiet turns the progress display off.
	Quiet bool

	// LoadDeadline bounds the wait for inferpick's in-flight load to
	// reach zero after the last request.
	LoadDeadline time.Duration
	// StartDeadline bounds each start-up wait (control plane, processes).
	StartDeadline time.Duration

	Out, Err io.Writer
}

// defaultConfig is the demo `make demo` runs: about a minute of a workload
// whose eight shared prefixes fit the four Pods' KV caches together but not
// any single one.
func defaultConfig() config {
	return config{
		ControlPlaneDir: os.Getenv("KUBEBUILDER_ASSETS"),
		BinDir:          "bin",
		WorkDir:         filepath.Join("bin", "demo"),
		CRDDir:          filepath.Join("config", "crd", "bases"),
		Pods:            4,
		FirstIP:         netip.MustParseAddr("127.0.0.11"),
		Port:            8000,
		GatewayAddr:     "127.0.0.1:8080",
		KVBlocks:        400,
		TimeScale:       1,
		Workload:        defaultWorkload(),
		LoadDeadline:    15 * time.Second,
		StartDeadline:   90 * time.Second,
		Out:             os.Stdout,
		Err:             os.Stderr,
	}
}

// parseConfig reads the flags in args over the defaults and the environment.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	c := defaultConfig()
	if v := getenv("KUBEBUILDER_ASSETS"); v != "" {
		c.ControlPlaneDir = v
	}
	c.Keep = truthy(getenv("KEEP"))
	c.Policy = getenv("DEMO_POLICY")
	if v := getenv("DEMO_REQUESTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return c, fmt.Errorf("DEMO_REQUESTS=%q: %w", v, err)
		}
		c.Workload.Requests = n
	}

	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.ControlPlaneDir, "controlplane", c.ControlPlaneDir, "directory holding etcd and kube-apiserver (default $KUBEBUILDER_ASSETS)")
	fs.StringVar(&c.BinDir, "bin", c.BinDir, "directory holding the inferpick and vllm-sim binaries")
	fs.StringVar(&c.WorkDir, "workdir", c.WorkDir, "directory for the kubeconfig and the logs")
	fs.StringVar(&c.CRDDir, "crds", c.CRDDir, "directory holding the InferencePool CRD")
	fs.StringVar(&c.GatewayAddr, "gateway", c.GatewayAddr, "address of the gateway stand-in")
	fs.IntVar(&c.Workload.Requests, "requests", c.Workload.Requests, "requests to send (env DEMO_REQUESTS)")
	fs.IntVar(&c.Workload.Concurrency, "concurrency", c.Workload.Concurrency, "requests in flight at once")
	fs.Float64Var(&c.Workload.AbortRate, "abort-rate", c.Workload.AbortRate, "fraction of requests the client cancels after the first chunk")
	fs.Float64Var(&c.TimeScale, "time-scale", c.TimeScale, "vllm-sim --time-scale (smaller runs faster)")
	fs.StringVar(&c.Policy, "policy", c.Policy, "inferpick --policy (env DEMO_POLICY; default: inferpick's)")
	fs.BoolVar(&c.Keep, "keep", c.Keep, "stay up after the report until Ctrl-C (env KEEP=1)")
	fs.BoolVar(&c.Quiet, "quiet", c.Quiet, "no progress display")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(c.Err)
			fs.PrintDefaults()
		}
		return c, err
	}
	return c, c.validate()
}

func (c config) validate() error {
	var errs []error
	if c.ControlPlaneDir == "" {
		errs = append(errs, errors.New("no control plane: pass --controlplane or set KUBEBUILDER_ASSETS "+
			"to the directory printed by hack/controlplane.sh (`make demo` does this)"))
	}
	if c.Pods < 1 || !c.FirstIP.Is4() || !c.FirstIP.IsLoopback() {
		errs = append(errs, fmt.Errorf("need at least one pod on an IPv4 loopback address, got %d at %s", c.Pods, c.FirstIP))
	}
	if err := c.Workload.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.TimeScale < 0 {
		errs = append(errs, fmt.Errorf("--time-scale %g is negative", c.TimeScale))
	}
	return errors.Join(errs...)
}

// podIPs returns the Pods' addresses, one after the other from FirstIP.
func (c config) podIPs() []netip.Addr {
	ips := make([]netip.Addr, 0, c.Pods)
	for ip := c.FirstIP; len(ips) < c.Pods; ip = ip.Next() {
		ips = append(ips, ip)
	}
	return ips
}

func truthy(v string) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b
}
