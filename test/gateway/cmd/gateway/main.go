// Command gateway runs the Envoy ext_proc stand-in of package gateway as a
// process, for the demo and for benchmarks. It is a test harness, not a proxy to
// put in front of real traffic.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/inferpick/inferpick/test/gateway"
)

// options are the command's flags.
type options struct {
	listen          string
	picker          string
	pickerTLS       bool
	pickerCA        string
	pickerInsecure  bool
	failureMode     string
	messageTimeout  time.Duration
	defaultUpstream string
	chunkSize       int
	maxAttempts     int
	retryOn         string
	allowCL         bool
	pickerHealth    string
	healthService   string
	healthInterval  time.Duration
	healthTimeout   time.Duration
	appProtocol     string
}

func (o *options) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	fs.StringVar(&o.picker, "picker", "127.0.0.1:9002", "ext_proc (picker) gRPC address; a comma-separated list makes a cluster of replicas, one stream per request spread round robin")
	fs.BoolVar(&o.pickerTLS, "picker-tls", false, "dial the picker over TLS")
	fs.StringVar(&o.pickerCA, "picker-ca", "", "CA bundle that signs the picker's certificate")
	fs.BoolVar(&o.pickerInsecure, "picker-insecure", false, "skip verifying the picker's certificate")
	fs.StringVar(&o.failureMode, "failure-mode", string(gateway.FailClose), "FailClose or FailOpen")
	fs.DurationVar(&o.messageTimeout, "message-timeout", gateway.DefaultMessageTimeout, "ext_proc per-message timeout (0: none, as Envoy in FULL_DUPLEX_STREAMED mode)")
	fs.StringVar(&o.defaultUpstream, "default-upstream", "", "ip:port for requests without a destination and for FailOpen")
	fs.IntVar(&o.chunkSize, "chunk-size", gateway.DefaultChunkSize, "largest body chunk sent to the picker")
	fs.IntVar(&o.maxAttempts, "max-attempts", gateway.DefaultRetryPolicy.MaxAttempts, "upstream attempts per request, the first included")
	fs.StringVar(&o.retryOn, "retry-on", "5xx,connect-failure", "comma list of 5xx, connect-failure (empty: no retries)")
	fs.BoolVar(&o.allowCL, "allow-content-length", false, "keep content-length on forwarded messages")
	fs.StringVar(&o.appProtocol, "app-protocol", "http", `the InferencePool's appProtocol: "kubernetes.io/h2c" sends every request upstream over HTTP/2 cleartext (gRPC requests go over it whatever this says)`)
	fs.StringVar(&o.pickerHealth, "picker-health", "", "the pickers' gRPC health addresses, comma-separated in the order of --picker: each is checked every --health-check-interval and takes no stream while it does not answer SERVING (empty: no checks)")
	fs.StringVar(&o.healthService, "health-check-service", "readiness", "service name the health checks ask about")
	fs.DurationVar(&o.healthInterval, "health-check-interval", time.Second, "time between two health checks of a picker")
	fs.DurationVar(&o.healthTimeout, "health-check-timeout", gateway.DefaultHealthCheckTimeout, "how long a health check may take before it fails")
}

func (o *options) validate() error {
	if _, err := gateway.ParseFailureMode(o.failureMode); err != nil {
		return err
	}
	if o.pickerCA != "" && !o.pickerTLS {
		return errors.New("--picker-ca needs --picker-tls")
	}
	if o.pickerInsecure && !o.pickerTLS {
		return errors.New("--picker-insecure needs --picker-tls")
	}
	for _, r := range strings.Split(o.retryOn, ",") {
		if r = strings.TrimSpace(r); r != "" && r != "5xx" && r != "connect-failure" {
			return fmt.Errorf("--retry-on: unknown condition %q", r)
		}
	}
	if o.pickerHealth != "" {
		if n, m := len(strings.Split(o.pickerHealth, ",")), len(strings.Split(o.picker, ",")); n != m {
			return fmt.Errorf("--picker-health lists %d addresses for %d in --picker", n, m)
		}
		if o.healthInterval <= 0 {
			return fmt.Errorf("--health-check-interval %v must be positive", o.healthInterval)
		}
		if o.healthTimeout <= 0 {
			return fmt.Errorf("--health-check-timeout %v must be positive", o.healthTimeout)
		}
	}
	return nil
}

func (o *options) gatewayOptions() ([]gateway.Option, error) {
	mode, _ := gateway.ParseFailureMode(o.failureMode)
	policy := gateway.RetryPolicy{MaxAttempts: o.maxAttempts}
	for _, r := range strings.Split(o.retryOn, ",") {
		switch strings.TrimSpace(r) {
		case "5xx":
			policy.On5xx = true
		case "connect-failure":
			policy.OnConnectFailure = true
		}
	}
	opts := []gateway.Option{
		gateway.WithFailureMode(mode),
		gateway.WithMessageTimeout(o.messageTimeout),
		gateway.WithDefaultUpstream(o.defaultUpstream),
		gateway.WithChunkSize(o.chunkSize),
		gateway.WithRetryPolicy(policy),
		gateway.WithAllowContentLength(o.allowCL),
		gateway.WithAppProtocol(o.appProtocol),
	}
	if o.pickerHealth != "" {
		cluster := gateway.DefaultPickerCluster
		cluster.HealthCheck = &gateway.HealthCheck{
			Addrs: strings.Split(o.pickerHealth, ","), Service: o.healthService, Interval: o.healthInterval,
			Timeout: o.healthTimeout,
		}
		opts = append(opts, gateway.WithPickerCluster(cluster))
	}
	if o.pickerTLS {
		cfg, err := gateway.TLSConfig(o.pickerCA, o.pickerInsecure)
		if err != nil {
			return nil, err
		}
		opts = append(opts, gateway.WithPickerTLS(cfg))
	}
	return opts, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func run() error {
	var o options
	o.addFlags(flag.CommandLine)
	flag.Parse()
	if err := o.validate(); err != nil {
		return err
	}
	opts, err := o.gatewayOptions()
	if err != nil {
		return err
	}
	g, err := gateway.NewCluster(strings.Split(o.picker, ","), opts...)
	if err != nil {
		return err
	}
	defer g.Close()
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("gateway listening on http://%s\n", lis.Addr())
	return g.Serve(ctx, lis)
}
