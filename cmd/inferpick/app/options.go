// Package app turns inferpick's flags into running servers.
package app

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/inferpick/inferpick/picker/extproc"
	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/policy"
)

// Options are inferpick's settings. Flag names follow the upstream endpoint
// picker where the two overlap.
type Options struct {
	PoolName       string
	PoolNamespace  string
	PoolGroup      string
	Kubeconfig     string
	kubeconfigFlag *flag.Flag

	StaticEndpoints string
	static          []netip.AddrPort

	GRPCPort       int
	GRPCHealthPort int
	MetricsPort    int
	BindAddress    string

	SecureServing       bool
	CertPath            string
	MetricsEndpointAuth bool

	LeaderElection              bool
	LeaderElectionLeaseDuration time.Duration
	LeaderElectionRenewDeadline time.Duration
	LeaderElectionRetryPeriod   time.Duration

	RefreshMetricsInterval time.Duration
	MetricsStaleness       time.Duration
	ModelServerMetricsPort int
	ModelServerMetricsPath string

	ConfigFile   string
	PolicyName   string
	Fallbacks    int
	MaxBodyBytes int
	DrainTimeout time.Duration
	// FlowControl bounds the queue of requests waiting for capacity.
	FlowControl flowcontrol.Options

	// Policy is the configuration built from ConfigFile and PolicyName.
	Policy policy.Config
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		PoolGroup:              "inference.networking.k8s.io",
		GRPCPort:               9002,
		GRPCHealthPort:         9003,
		MetricsPort:            9090,
		SecureServing:          true,
		MetricsEndpointAuth:    true,
		RefreshMetricsInterval: 50 * time.Millisecond,
		MetricsStaleness:       2 * time.Second,
		ModelServerMetricsPath: "/metrics",
		Fallbacks:              2,
		MaxBodyBytes:           extproc.DefaultMaxBodyBytes,
		DrainTimeout:           30 * time.Second,

		// controller-runtime's defaults.
		LeaderElectionLeaseDuration: 15 * time.Second,
		LeaderElectionRenewDeadline: 10 * time.Second,
		LeaderElectionRetryPeriod:   2 * time.Second,
	}
}

// AddFlags registers the flags on fs, klog's among them.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.PoolName, "pool-name", o.PoolName, "Name of the InferencePool this picker serves.")
	fs.StringVar(&o.PoolNamespace, "pool-namespace", o.PoolNamespace, "Namespace of the InferencePool (default: $NAMESPACE, else \"default\").")
	fs.StringVar(&o.PoolGroup, "pool-group", o.PoolGroup, "API group of the InferencePool.")
	if f := fs.Lookup("kubeconfig"); f != nil {
		// controller-runtime registers it on the default flag set.
		o.kubeconfigFlag = f
	} else {
		fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig; in-cluster configuration when empty.")
	}
	fs.StringVar(&o.StaticEndpoints, "static-endpoints", o.StaticEndpoints, "Comma-separated ip:port list to route over, with no Kubernetes at all.")
	fs.IntVar(&o.GRPCPort, "grpc-port", o.GRPCPort, "Port of the ext_proc gRPC service.")
	fs.IntVar(&o.GRPCHealthPort, "grpc-health-port", o.GRPCHealthPort, "Port of the gRPC health service (liveness, readiness, ext_proc).")
	fs.IntVar(&o.MetricsPort, "metrics-port", o.MetricsPort, "Port of the Prometheus metrics and /debug/workers.")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "Address the servers listen on (all interfaces when empty).")
	fs.BoolVar(&o.SecureServing, "secure-serving", o.SecureServing, "Serve ext_proc over TLS (self-signed unless --cert-path).")
	fs.StringVar(&o.CertPath, "cert-path", o.CertPath, "Directory holding tls.crt and tls.key for the ext_proc service; reloaded on change.")
	fs.BoolVar(&o.MetricsEndpointAuth, "metrics-endpoint-auth", o.MetricsEndpointAuth, "In a cluster, require an authenticated and authorized caller (TokenReview, SubjectAccessReview) on the metrics port.")
	fs.BoolVar(&o.LeaderElection, "ha-enable-leader-election", o.LeaderElection, "Run several replicas; only the elected one reports ready.")
	fs.DurationVar(&o.LeaderElectionLeaseDuration, "leader-election-lease-duration", o.LeaderElectionLeaseDuration, "How long a replica waits before taking over a lease that is not renewed.")
	fs.DurationVar(&o.LeaderElectionRenewDeadline, "leader-election-renew-deadline", o.LeaderElectionRenewDeadline, "How long the leader keeps trying to renew its lease before giving it up.")
	fs.DurationVar(&o.LeaderElectionRetryPeriod, "leader-election-retry-period", o.LeaderElectionRetryPeriod, "How often replicas try to acquire or renew the lease.")
	fs.DurationVar(&o.RefreshMetricsInterval, "refresh-metrics-interval", o.RefreshMetricsInterval, "How often each model server's /metrics is scraped.")
	fs.DurationVar(&o.MetricsStaleness, "metrics-staleness-threshold", o.MetricsStaleness, "Scraped metrics older than this are not trusted by the policy.")
	fs.IntVar(&o.ModelServerMetricsPort, "model-server-metrics-port", o.ModelServerMetricsPort, "Port of the model servers' /metrics (0: the serving port).")
	fs.StringVar(&o.ModelServerMetricsPath, "model-server-metrics-path", o.ModelServerMetricsPath, "Path of the model servers' metrics.")
	fs.StringVar(&o.ConfigFile, "config-file", o.ConfigFile, "YAML file with the policy configuration (see docs/policy.md).")
	fs.StringVar(&o.PolicyName, "policy", o.PolicyName, "Routing policy, overriding the config file's: cache-aware, least-load, round-robin, random, power-of-two, weighted-scorer.")
	fs.IntVar(&o.Fallbacks, "fallbacks", o.Fallbacks, "Endpoints listed after the primary for the gateway to fall back on.")
	fs.IntVar(&o.MaxBodyBytes, "max-request-body-bytes", o.MaxBodyBytes, "Largest request body accepted; larger ones get 413.")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout, "On SIGTERM, how long in-flight streams may finish before they are cut.")
	o.FlowControl.AddFlags(fs)
	klog.InitFlags(fs)
}

// fileConfig is the --config-file document.
type fileConfig struct {
	Policy policy.Config `json:"policy"`
}

// Complete fills what the flags leave implicit: the namespace from the
// environment, the parsed endpoint list, the policy configuration.
func (o *Options) Complete() error {
	if o.kubeconfigFlag != nil {
		o.Kubeconfig = o.kubeconfigFlag.Value.String()
	}
	if o.PoolNamespace == "" {
		o.PoolNamespace = os.Getenv("NAMESPACE")
	}
	if o.PoolNamespace == "" {
		o.PoolNamespace = "default"
	}
	if o.StaticEndpoints != "" {
		for e := range strings.SplitSeq(o.StaticEndpoints, ",") {
			ap, err := netip.ParseAddrPort(strings.TrimSpace(e))
			if err != nil {
				return fmt.Errorf("--static-endpoints: %q is not ip:port", e)
			}
			o.static = append(o.static, ap)
		}
	}
	if o.ConfigFile != "" {
		raw, err := os.ReadFile(o.ConfigFile)
		if err != nil {
			return fmt.Errorf("--config-file: %w", err)
		}
		var fc fileConfig
		if err := yaml.UnmarshalStrict(raw, &fc); err != nil {
			return fmt.Errorf("--config-file %s: %w", o.ConfigFile, err)
		}
		o.Policy = fc.Policy
	}
	if o.PolicyName != "" {
		o.Policy.Name = o.PolicyName
	}
	return nil
}

// Validate reports settings that cannot work together.
func (o *Options) Validate() error {
	var errs []error
	if len(o.static) == 0 && o.PoolName == "" {
		errs = append(errs, errors.New("either --pool-name or --static-endpoints is required"))
	}
	if len(o.static) > 0 && o.PoolName != "" {
		errs = append(errs, errors.New("--pool-name and --static-endpoints exclude each other"))
	}
	if len(o.static) > 0 && o.LeaderElection {
		errs = append(errs, errors.New("--ha-enable-leader-election needs a cluster, not --static-endpoints"))
	}
	for name, p := range map[string]int{"--grpc-port": o.GRPCPort, "--grpc-health-port": o.GRPCHealthPort, "--metrics-port": o.MetricsPort} {
		if p < 0 || p > 65535 {
			errs = append(errs, fmt.Errorf("%s %d is not a port", name, p))
		}
	}
	if o.LeaderElectionRenewDeadline >= o.LeaderElectionLeaseDuration || o.LeaderElectionRetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("leader election needs 0 < --leader-election-retry-period and --leader-election-renew-deadline %s < --leader-election-lease-duration %s",
			o.LeaderElectionRenewDeadline, o.LeaderElectionLeaseDuration))
	}
	if o.Fallbacks < 0 {
		errs = append(errs, fmt.Errorf("--fallbacks %d is negative", o.Fallbacks))
	}
	if o.MaxBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("--max-request-body-bytes %d must be positive", o.MaxBodyBytes))
	}
	if o.RefreshMetricsInterval <= 0 {
		errs = append(errs, fmt.Errorf("--refresh-metrics-interval %s must be positive", o.RefreshMetricsInterval))
	}
	return errors.Join(errs...)
}
