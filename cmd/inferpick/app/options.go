// Package app turns inferpick's flags into running servers.
package app

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/inferpick/inferpick/picker/attrexpr"
	"github.com/inferpick/inferpick/picker/extproc"
	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/kvindex"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/policy/fileconfig"
	"github.com/inferpick/inferpick/picker/portnum"
	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/scrape"
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

	// EndpointSelector and EndpointTargetPorts select model-server pods
	// by label, with no InferencePool object.
	EndpointSelector    string
	EndpointTargetPorts portList
	selector            labels.Selector

	GRPCPort       int
	GRPCHealthPort int
	MetricsPort    int
	BindAddress    string

	SecureServing       bool
	CertPath            string
	TLSMinVersion       string
	TLSCipherSuites     string
	tlsMinVersion       uint16
	tlsCipherSuites     []uint16
	MetricsEndpointAuth bool
	// MetricsSecureServing serves the metrics port over HTTPS.
	MetricsSecureServing bool
	EnablePprof          bool

	// GRPCMaxRecvMsgSize and GRPCMaxSendMsgSize bound the ext_proc
	// server's messages; 0 keeps gRPC's defaults (4 MiB received).
	GRPCMaxRecvMsgSize byteSize
	GRPCMaxSendMsgSize byteSize
	// GRPCMaxConcurrentStreams caps the ext_proc streams of one gateway
	// connection; 0 is gRPC's default, no cap.
	GRPCMaxConcurrentStreams uint

	// KVEventsPort, when not 0, is where every model server publishes its
	// KV-cache events (vLLM's --kv-events-config endpoint): the picker
	// subscribes to each worker there, and asks a server's /tokenize where
	// a prompt its own index does not know is cached. KVEventsTopic is the
	// topic prefix subscribed to; TokenizeTimeout bounds one /tokenize.
	// KVEventsReplayPort, when not 0, is where every model server replays
	// the batches it keeps (vLLM's replay_endpoint): a subscription starts
	// from them, and a gap is filled from them; KVEventsReplayTimeout
	// bounds one replay. KVEventsListen, when not empty, is the address
	// ("host:port") where the picker takes the events of model servers that
	// connect to it (an endpoint naming the picker), each under the topic
	// kv@<pod IP>@<model>; with it alone, no server is dialled.
	KVEventsPort          int
	KVEventsListen        string
	KVEventsTopic         string
	KVEventsReplayPort    int
	KVEventsReplayTimeout time.Duration
	TokenizeTimeout       time.Duration
	// KVEventsOffloadWeight is what a block a server keeps only in its
	// offloading tier counts for against one on its GPU.
	KVEventsOffloadWeight float64

	// Keepalive of the ext_proc server: it pings a connection silent for
	// KeepaliveTime and closes it (cancelling its streams, so their guards
	// are released) when no answer comes within KeepaliveTimeout. Clients
	// may ping no more often than KeepaliveMinTime.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	KeepaliveMinTime time.Duration
	// ExtProcTransport is the ext_proc server's HTTP/2 transport: "direct"
	// (the picker's own, extproc.DirectServer) or "grpc" (grpc-go's).
	ExtProcTransport string

	// ClientCAPath, when set, makes the ext_proc server require client
	// certificates signed by the CAs in this PEM file (reloaded on change).
	ClientCAPath string

	// Tracing exports a span per request over OTLP (see tracing.go).
	Tracing bool

	LeaderElection bool
	// HAMode says which replicas serve under leader election: all of them
	// (active-active) or the leader alone (active-passive). See ha.go.
	HAMode                      string
	LeaderElectionLeaseDuration time.Duration
	LeaderElectionRenewDeadline time.Duration
	LeaderElectionRetryPeriod   time.Duration

	RefreshMetricsInterval time.Duration
	RefreshModelsInterval  time.Duration
	MetricsStaleness       time.Duration
	ModelServerMetricsPort int
	ModelServerMetricsPath string
	// ModelServer says which series of the metrics pages are read.
	ModelServer modelServer

	ConfigFile   string
	ConfigText   string
	PolicyName   string
	Fallbacks    int
	MaxBodyBytes int
	// MaxBufferedBodyBytes is the budget for request bodies buffered
	// across all streams.
	MaxBufferedBodyBytes int
	DrainTimeout         time.Duration
	// FlowControl bounds the queue of requests waiting for capacity.
	FlowControl flowcontrol.Options
	// ObjectivePriorities ("name=priority,...") gives objectives priorities
	// without InferenceObjective objects (static mode, or on top of them).
	ObjectivePriorities string
	objectives          map[string]int
	// fileFlowControl is what the config file (configSource) asks of the
	// flow-control queue; see completeFlowControl.
	fileFlowControl fileconfig.FlowControl
	configSource    string
	// attributes are what the config file's request-attribute-reporter
	// plugins report at the end of each response.
	attributes []attrexpr.Attribute

	// DisableSubsetFilter ignores the gateway's subset hint.
	DisableSubsetFilter bool

	// PrintVersion asks for the version line instead of a run.
	PrintVersion bool

	// PrefixIndexMaxBlocks, when positive, overrides the policy config's
	// index.maxBlocks.
	PrefixIndexMaxBlocks int

	// Policy is the configuration built from ConfigFile (or ConfigText)
	// and PolicyName.
	Policy policy.Config

	// Warnings are the flags and configuration that have no effect here,
	// logged once at start.
	Warnings []Warning

	logging logging
	fs      *flag.FlagSet
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
		RefreshModelsInterval:  scrape.DefaultModelsInterval,
		MetricsStaleness:       2 * time.Second,
		ModelServerMetricsPath: "/metrics",
		ModelServer:            newModelServer(),
		Fallbacks:              2,
		MaxBodyBytes:           extproc.DefaultMaxBodyBytes,
		MaxBufferedBodyBytes:   extproc.DefaultMaxBufferedBodyBytes,
		DrainTimeout:           30 * time.Second,
		KeepaliveTime:          30 * time.Second,
		KeepaliveTimeout:       10 * time.Second,
		KeepaliveMinTime:       5 * time.Second,
		ExtProcTransport:       transportDirect,
		TokenizeTimeout:        kvindex.DefaultTimeout,
		KVEventsReplayTimeout:  kvindex.DefaultReplayTimeout,
		KVEventsOffloadWeight:  kvindex.DefaultOffloadWeight,

		HAMode: HAActiveActive,

		// controller-runtime's defaults.
		LeaderElectionLeaseDuration: 15 * time.Second,
		LeaderElectionRenewDeadline: 10 * time.Second,
		LeaderElectionRetryPeriod:   2 * time.Second,
	}
}

// AddFlags registers the flags on fs: inferpick's, the upstream endpoint
// picker's it accepts, and the logging flags (-v and klog's, --zap-*).
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.fs = fs
	fs.StringVar(&o.PoolName, "pool-name", o.PoolName, "Name of the InferencePool this picker serves.")
	fs.StringVar(&o.PoolNamespace, "pool-namespace", o.PoolNamespace, "Namespace of the InferencePool (default: $NAMESPACE, else \"default\").")
	fs.StringVar(&o.PoolGroup, "pool-group", o.PoolGroup, "API group of the InferencePool.")
	if f := fs.Lookup("kubeconfig"); f != nil {
		// controller-runtime registers it on the default flag set.
		o.kubeconfigFlag = f
	} else {
		fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig; in-cluster configuration when empty.")
	}
	fs.StringVar(&o.EndpointSelector, "endpoint-selector", o.EndpointSelector, "Label selector (Kubernetes syntax) of the model-server pods of --pool-namespace to serve without an InferencePool object; excludes --pool-name.")
	fs.Var(&o.EndpointTargetPorts, "endpoint-target-ports", "Comma-separated target ports of the pods --endpoint-selector selects (1 to 8).")
	fs.StringVar(&o.StaticEndpoints, "static-endpoints", o.StaticEndpoints, "Comma-separated ip:port list to route over, with no Kubernetes at all.")
	fs.IntVar(&o.GRPCPort, "grpc-port", o.GRPCPort, "Port of the ext_proc gRPC service.")
	fs.IntVar(&o.GRPCHealthPort, "grpc-health-port", o.GRPCHealthPort, "Port of the gRPC health service (liveness, readiness, inference-extension, ext_proc).")
	fs.IntVar(&o.MetricsPort, "metrics-port", o.MetricsPort, "Port of the Prometheus metrics and /debug/workers.")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "Address the servers listen on (all interfaces when empty).")
	fs.BoolVar(&o.SecureServing, "secure-serving", o.SecureServing, "Serve ext_proc over TLS (self-signed unless --cert-path).")
	fs.StringVar(&o.CertPath, "cert-path", o.CertPath, "Directory holding tls.crt and tls.key for the ext_proc service; reloaded on change.")
	fs.StringVar(&o.TLSMinVersion, "tls-min-version", o.TLSMinVersion, "Lowest TLS version the ext_proc service accepts: VersionTLS12 (when empty) or VersionTLS13; VersionTLS10 and VersionTLS11 are accepted too.")
	fs.StringVar(&o.TLSCipherSuites, "tls-cipher-suites", o.TLSCipherSuites, "Comma-separated crypto/tls cipher suite names the ext_proc service offers up to TLS 1.2 (TLS 1.3 suites are fixed); Go's defaults when empty.")
	fs.Var(&o.GRPCMaxRecvMsgSize, "grpc-max-recv-msg-size", "Largest gRPC message the ext_proc service accepts (e.g. 8Mi, 10MiB); gRPC's 4 MiB when empty.")
	fs.Var(&o.GRPCMaxSendMsgSize, "grpc-max-send-msg-size", "Largest gRPC message the ext_proc service sends (e.g. 8Mi); unbounded when empty.")
	fs.UintVar(&o.GRPCMaxConcurrentStreams, "grpc-max-concurrent-streams", o.GRPCMaxConcurrentStreams, "Most ext_proc streams (requests in flight) on one gateway connection, announced in HTTP/2 settings; a stream beyond it is refused, and the gateway opens another connection or waits. 0: no cap.")
	fs.IntVar(&o.KVEventsPort, "kv-events-port", o.KVEventsPort, "Port on each model server pod where it publishes KV-cache events over ZeroMQ (vLLM's --kv-events-config endpoint, tcp://*:5557): the picker subscribes to every pod, learns which prompts each cache holds whichever replica routed them, and tokenizes a prompt it does not know with the servers' /tokenize. 0: off.")
	fs.StringVar(&o.KVEventsListen, "kv-events-listen", o.KVEventsListen, "Address (e.g. :5557) where the picker listens for model servers that connect to it to publish their KV-cache events (vLLM's --kv-events-config endpoint naming the picker's Service, tcp://<service>:5557), each under the topic kv@<pod IP>@<model>; KV-event routing as with --kv-events-port, which may be given too. A server's connection reaches one picker replica only. Empty: off.")
	fs.IntVar(&o.KVEventsReplayPort, "kv-events-replay-port", o.KVEventsReplayPort, "Port on each model server pod where it replays the KV-cache event batches it keeps (vLLM's --kv-events-config replay_endpoint, e.g. tcp://*:5558): a picker that (re)connects learns what the caches already hold, and one that missed batches reads them again instead of forgetting the pod's blocks. 0: off. Needs --kv-events-port.")
	fs.DurationVar(&o.KVEventsReplayTimeout, "kv-events-replay-timeout", o.KVEventsReplayTimeout, "Longest a replay from one engine under --kv-events-replay-port may take; past it the replay counts as failed and the engine's blocks are forgotten until its events tell them again.")
	fs.StringVar(&o.KVEventsTopic, "kv-events-topic", o.KVEventsTopic, "Topic prefix subscribed to on --kv-events-port and --kv-events-listen (vLLM's kv-events-config topic); every topic when empty.")
	fs.Float64Var(&o.KVEventsOffloadWeight, "kv-events-offload-weight", o.KVEventsOffloadWeight, "What a prompt block a server keeps only in its KV offloading tier (vLLM's OffloadingConnector, medium CPU) counts for under --kv-events-port or --kv-events-listen, against one in its GPU cache (1), from 0 to 1: the server reads it back instead of prefilling it.")
	fs.DurationVar(&o.TokenizeTimeout, "tokenize-timeout", o.TokenizeTimeout, "Longest wait for a model server's /tokenize under --kv-events-port or --kv-events-listen; past it the prompt is routed on the picker's own index.")
	fs.StringVar(&o.ExtProcTransport, "extproc-transport", o.ExtProcTransport, "HTTP/2 transport of the ext_proc service: direct (the picker's own: each connection's messages are handled on its reader, replies gathered into one write) or grpc (grpc-go's).")
	fs.BoolVar(&o.EnablePprof, "enable-pprof", o.EnablePprof, "Serve Go's pprof handlers under /debug/pprof/ on the metrics port (behind --metrics-endpoint-auth in a cluster).")
	fs.BoolVar(&o.MetricsEndpointAuth, "metrics-endpoint-auth", o.MetricsEndpointAuth, "In a cluster, require an authenticated and authorized caller (TokenReview, SubjectAccessReview) on the metrics port.")
	fs.BoolVar(&o.MetricsSecureServing, "metrics-secure-serving", o.MetricsSecureServing, "In a cluster, serve the metrics port over HTTPS (self-signed); plain HTTP otherwise, as the upstream endpoint picker does.")
	fs.BoolVar(&o.Tracing, "tracing", o.Tracing, "Export a trace span per request (the pick as a child span) over OTLP/gRPC, configured by the standard OTEL_* environment variables; trace context is taken from the request's traceparent.")
	fs.BoolVar(&o.LeaderElection, "ha-enable-leader-election", o.LeaderElection, "Run several replicas: the elected one records the Events; which ones serve follows --ha-mode.")
	fs.StringVar(&o.HAMode, "ha-mode", o.HAMode, "Under leader election, active-active (every replica ready and routing) or active-passive (only the leader ready).")
	fs.DurationVar(&o.LeaderElectionLeaseDuration, "leader-election-lease-duration", o.LeaderElectionLeaseDuration, "How long a replica waits before taking over a lease that is not renewed.")
	fs.DurationVar(&o.LeaderElectionRenewDeadline, "leader-election-renew-deadline", o.LeaderElectionRenewDeadline, "How long the leader keeps trying to renew its lease before giving it up.")
	fs.DurationVar(&o.LeaderElectionRetryPeriod, "leader-election-retry-period", o.LeaderElectionRetryPeriod, "How often replicas try to acquire or renew the lease.")
	fs.DurationVar(&o.RefreshMetricsInterval, "refresh-metrics-interval", o.RefreshMetricsInterval, "How often each model server's /metrics is scraped.")
	fs.DurationVar(&o.RefreshModelsInterval, "refresh-models-interval", o.RefreshModelsInterval, "How often each model server's /v1/models is read for the base models and LoRA adapters it serves; 0 never reads it (the model_name label of the metrics is used).")
	fs.DurationVar(&o.MetricsStaleness, "metrics-staleness-threshold", o.MetricsStaleness, "Scraped metrics older than this are not trusted by the policy.")
	fs.IntVar(&o.ModelServerMetricsPort, "model-server-metrics-port", o.ModelServerMetricsPort, "Port of the model servers' /metrics (0: the serving port); for pools of one target port and static endpoints, as each port of a pool of several is scraped on itself.")
	fs.StringVar(&o.ModelServerMetricsPath, "model-server-metrics-path", o.ModelServerMetricsPath, "Path of the model servers' metrics.")
	o.ModelServer.addFlags(fs)
	fs.StringVar(&o.ConfigFile, "config-file", o.ConfigFile, "YAML file with the policy configuration, inferpick's own or an EndpointPickerConfig (see docs/policy.md).")
	fs.StringVar(&o.ConfigText, "config-text", o.ConfigText, "The --config-file document given inline.")
	fs.StringVar(&o.PolicyName, "policy", o.PolicyName, "Routing policy, overriding the config file's: cache-aware, least-load, round-robin, random, power-of-two, weighted-scorer.")
	fs.IntVar(&o.Fallbacks, "fallbacks", o.Fallbacks, "Endpoints listed after the primary for the gateway to fall back on.")
	fs.IntVar(&o.MaxBodyBytes, "max-request-body-bytes", o.MaxBodyBytes, "Largest request body accepted; larger ones get 413.")
	fs.IntVar(&o.MaxBufferedBodyBytes, "max-buffered-body-bytes", o.MaxBufferedBodyBytes, "Request-body bytes buffered across all streams at once; a request that would pass it gets 429. Keep it well under the container's memory limit.")
	fs.DurationVar(&o.KeepaliveTime, "grpc-keepalive-time", o.KeepaliveTime, "The ext_proc server pings a gateway connection that has been silent this long.")
	fs.DurationVar(&o.KeepaliveTimeout, "grpc-keepalive-timeout", o.KeepaliveTimeout, "A connection that does not answer a ping within this, or reads none of the replies for this long, is closed; its streams end and their load is released.")
	fs.DurationVar(&o.KeepaliveMinTime, "grpc-keepalive-min-time", o.KeepaliveMinTime, "Gateways may ping the ext_proc server at most this often (more often closes the connection), with or without streams.")
	fs.StringVar(&o.ClientCAPath, "client-ca-path", o.ClientCAPath, "PEM file of the CAs whose client certificates the ext_proc server requires (mTLS); reloaded when it changes. Needs --secure-serving.")
	fs.IntVar(&o.PrefixIndexMaxBlocks, "prefix-index-max-blocks", o.PrefixIndexMaxBlocks,
		fmt.Sprintf("Hard cap on the prefix index's (block, worker) entries, whatever the model servers report (0: the config file's index.maxBlocks, else %d).", prefix.DefaultMaxBlocks))
	fs.BoolVar(&o.DisableSubsetFilter, "disable-endpoint-subset-filter", o.DisableSubsetFilter, "Ignore the gateway's endpoint subset hint (envoy.lb.subset_hint): pick among all of the pool's endpoints.")
	fs.BoolVar(&o.PrintVersion, "version", o.PrintVersion, "Print the version and source revision, then exit.")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout, "On SIGTERM, how long in-flight streams may finish before they are cut.")
	addInertFlags(fs)
	o.logging.addFlags(fs)
	o.FlowControl.AddFlags(fs)
	fs.StringVar(&o.ObjectivePriorities, "objective-priorities", o.ObjectivePriorities, "Priorities of objectives named by x-gateway-inference-objective, as name=priority,...; for use without InferenceObjective objects (e.g. with --static-endpoints).")
}

// Parse reads args as inferpick's command line on fs: the flags (every
// one, see parseArgs), then Complete and Validate, unless --version asks
// for the version alone. The options come back with the error too, as far
// as they were read.
func Parse(fs *flag.FlagSet, args []string) (*Options, error) {
	o := NewOptions()
	o.AddFlags(fs)
	offApart, err := parseArgs(fs, args)
	if err != nil {
		return o, err
	}
	if o.PrintVersion {
		return o, nil
	}
	if err := o.Complete(); err != nil {
		return o, err
	}
	for _, name := range offApart {
		o.Warnings = append(o.Warnings, upstreamReadsOn(name))
	}
	err = o.Validate()
	return o, err
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
	// The upstream chart renders trtllm-serve's path as
	// --model-server-metrics-path="/prometheus/metrics", quotes included.
	o.ModelServerMetricsPath = strings.Trim(o.ModelServerMetricsPath, `"`)
	if o.PoolNamespace == "" {
		o.PoolNamespace = "default"
	}
	if err := o.logging.complete(o.fs); err != nil {
		return err
	}
	if o.StaticEndpoints != "" {
		for e := range strings.SplitSeq(o.StaticEndpoints, ",") {
			ap, err := netip.ParseAddrPort(strings.TrimSpace(e))
			if err != nil || ap.Port() == 0 {
				return fmt.Errorf("--static-endpoints: %q is not ip:port", e)
			}
			o.static = append(o.static, ap)
		}
	}
	if o.EndpointSelector != "" {
		sel, err := labels.Parse(o.EndpointSelector)
		if err != nil {
			return fmt.Errorf("--endpoint-selector: %w", err)
		}
		o.selector = sel
	}
	var err error
	if o.tlsMinVersion, err = parseTLSVersion(o.TLSMinVersion); err != nil {
		return fmt.Errorf("--tls-min-version: %w", err)
	}
	if o.tlsCipherSuites, err = parseCipherSuites(o.TLSCipherSuites); err != nil {
		return fmt.Errorf("--tls-cipher-suites: %w", err)
	}
	if err := o.readConfig(); err != nil {
		return err
	}
	o.completeFlowControl()
	if err := o.ModelServer.complete(o.flagSet); err != nil {
		return err
	}
	if o.PolicyName != "" {
		o.Policy.Name = o.PolicyName
	}
	for _, w := range o.Policy.Default().Warnings() {
		o.Warnings = append(o.Warnings, Warning{Flag: o.configSource, Reason: w})
	}
	if o.ObjectivePriorities != "" {
		o.objectives = map[string]int{}
		for e := range strings.SplitSeq(o.ObjectivePriorities, ",") {
			name, prio, ok := strings.Cut(strings.TrimSpace(e), "=")
			n, err := strconv.Atoi(prio)
			if !ok || name == "" || err != nil {
				return fmt.Errorf("--objective-priorities: %q is not name=priority", e)
			}
			o.objectives[name] = n
		}
	}
	if o.PrefixIndexMaxBlocks > 0 {
		o.Policy.Index.MaxBlocks = o.PrefixIndexMaxBlocks
	}
	o.Warnings = append(o.Warnings, inertWarnings(o.fs)...)
	if !o.LeaderElection {
		for _, name := range []string{"ha-mode", "leader-election-lease-duration", "leader-election-renew-deadline", "leader-election-retry-period"} {
			if o.flagSet(name) {
				o.Warnings = append(o.Warnings, Warning{Flag: "--" + name, Value: o.fs.Lookup(name).Value.String(),
					Reason: "--ha-enable-leader-election is not set: the picker takes no lease, is ready on its own and routes as the only replica"})
			}
		}
	}
	if !o.FlowControl.Enabled {
		o.fs.Visit(func(f *flag.Flag) {
			if strings.HasPrefix(f.Name, "flow-control-") {
				o.Warnings = append(o.Warnings, Warning{Flag: "--" + f.Name, Value: f.Value.String(),
					Reason: "--flow-control is not given: there is no queue; a saturated pool takes requests of priority 0 and above all the same, and answers others 429 at once"})
			}
		})
	}
	if o.KVEventsListen != "" && o.LeaderElection {
		why := "every replica routes (--ha-mode active-active), but a server's connection reaches one of them, and the others route its pod without its events"
		if o.HAMode == HAActivePassive {
			why = "a server's connection stays with the replica it reached while that replica lives, so after a failover the new leader routes without the events of the servers still connected to the old one"
		}
		o.Warnings = append(o.Warnings, Warning{Flag: "--kv-events-listen", Value: o.KVEventsListen,
			Message: kvListenMessage,
			Reason:  why + "; have the servers bind (tcp://*:PORT) and use --kv-events-port, which every replica subscribes to"})
	}
	if len(o.static) > 0 && o.PoolName != "" {
		o.Warnings = append(o.Warnings, Warning{Flag: "--pool-name", Value: o.PoolName,
			Reason: "--static-endpoints is given: requests are routed over that list, not the pool's pods"})
	}
	if staleness := o.policyConfig().Default().MetricsStaleness.Duration; o.RefreshMetricsInterval >= staleness {
		o.Warnings = append(o.Warnings, Warning{Flag: "--refresh-metrics-interval", Value: o.RefreshMetricsInterval.String(),
			Message: staleMessage,
			Reason: fmt.Sprintf("metrics are trusted for %s after a scrape (--metrics-staleness-threshold, or metricsStaleness in the configuration): "+
				"for part of each interval the policy routes without them; scrape more often than that", staleness)})
	}
	if len(o.static) > 0 && o.MetricsSecureServing {
		o.Warnings = append(o.Warnings, Warning{Flag: "--metrics-secure-serving", Value: "true",
			Reason: "--static-endpoints is given: the metrics port serves plain HTTP outside a cluster"})
	}
	if len(o.static) > 0 && o.EndpointSelector != "" {
		o.Warnings = append(o.Warnings, Warning{Flag: "--endpoint-selector", Value: o.EndpointSelector,
			Reason: "--static-endpoints is given: requests are routed over that list, not the selected pods"})
	}
	if o.Policy.DataParallel != nil && o.flagSet("fallbacks") && o.Fallbacks > 0 {
		o.Warnings = append(o.Warnings, Warning{Flag: "--fallbacks", Value: strconv.Itoa(o.Fallbacks),
			Reason: fmt.Sprintf("policy.dataParallel is set (%s): each request goes to its pod's primary port alone, x-data-parallel-host-port naming one rank, which another pod's sidecar would refuse, so no fallbacks are listed", o.configSource)})
	}
	if len(o.static) > 0 && o.Policy.ContextLength != nil {
		o.Warnings = append(o.Warnings, Warning{Flag: o.configSource, Value: "policy.contextLength",
			Reason: "--static-endpoints is given: a static endpoint carries no pod label, so each takes a prompt of any length"})
	}
	if len(o.static) > 0 && len(o.Policy.LabelKeys()) > 0 {
		o.Warnings = append(o.Warnings, Warning{Flag: o.configSource, Value: "policy.labelFilters",
			Reason: "--static-endpoints is given: a static endpoint carries no pod label, so each label filter sees every endpoint without its labels"})
	}
	return nil
}

// readConfig reads --config-file or --config-text.
func (o *Options) readConfig() error {
	src, raw := "--config-text", []byte(o.ConfigText)
	if o.ConfigFile != "" {
		if o.ConfigText != "" {
			return errors.New("--config-file and --config-text exclude each other")
		}
		src = "--config-file " + o.ConfigFile
		var err error
		if raw, err = os.ReadFile(o.ConfigFile); err != nil {
			return fmt.Errorf("--config-file: %w", err)
		}
	}
	if len(raw) == 0 {
		return nil
	}
	f, err := fileconfig.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	o.Policy = f.Policy
	if f.MetricsPath != "" && !o.flagSet("model-server-metrics-path") {
		o.ModelServerMetricsPath = f.MetricsPath
	}
	if f.KVEventsPort != 0 && !o.flagSet("kv-events-port") {
		o.KVEventsPort = f.KVEventsPort
	}
	if f.KVEventsListen != "" && !o.flagSet("kv-events-listen") {
		o.KVEventsListen = f.KVEventsListen
	}
	if f.KVEventsTopic != "" && !o.flagSet("kv-events-topic") {
		o.KVEventsTopic = f.KVEventsTopic
	}
	if f.ModelServerType != "" && !o.flagSet(flagModelServerType) {
		o.ModelServer.Type = f.ModelServerType
	}
	// The picker's maxNumOfEndpoints lists the primary and N-1 fallbacks;
	// --fallbacks, when given, wins, as the other flags win over the file.
	if f.MaxEndpoints > 0 {
		switch {
		case !o.flagSet("fallbacks"):
			o.Fallbacks = f.MaxEndpoints - 1
		case o.Fallbacks != f.MaxEndpoints-1 && f.Policy.DataParallel == nil:
			// Under dataParallel neither is listed; the file's warnings
			// say so of maxNumOfEndpoints, Complete of --fallbacks.
			o.Warnings = append(o.Warnings, Warning{Flag: src, Reason: fmt.Sprintf(
				"max-score-picker maxNumOfEndpoints %d has no effect: --fallbacks %d is given, so %d endpoints are listed",
				f.MaxEndpoints, o.Fallbacks, o.Fallbacks+1)})
		}
	}
	for _, w := range f.Warnings {
		o.Warnings = append(o.Warnings, Warning{Flag: src, Reason: w})
	}
	o.fileFlowControl, o.configSource = f.FlowControl, src
	o.attributes = f.Attributes
	return nil
}

// upstreamFlowControlEnv is the upstream picker's (deprecated) switch for
// its flow-control layer, which its chart sets through
// inferenceExtension.env.
const upstreamFlowControlEnv = "ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER"

// completeFlowControl turns the queue on as upstream's switches ask, the
// config file's flowControl feature gate or upstreamFlowControlEnv, and
// takes the bounds of the file's flowControl section, the flags winning
// over both. A queue turned on by upstream's switches alone takes
// upstream's defaults for the bounds the section leaves out, so that a
// migrated picker queues as before.
func (o *Options) completeFlowControl() {
	fc := o.fileFlowControl
	upstreamOn := fc.Gate
	if v, ok := os.LookupEnv(upstreamFlowControlEnv); ok {
		on, _ := strconv.ParseBool(v)
		upstreamOn = upstreamOn || on
		what := "ignored: it is not true"
		if on {
			what = "turns the flow-control queue on, as --flow-control (with upstream's defaults for the bounds no flag or flowControl section gives)"
		}
		o.Warnings = append(o.Warnings, Warning{Flag: upstreamFlowControlEnv, Value: v, Message: deprecatedMessage,
			Reason: "deprecated upstream, where featureGates: [flowControl] in the config file replaces it; here it " + what})
	}
	switch {
	case !o.flagSet("flow-control"):
		o.FlowControl.Enabled = upstreamOn
		if upstreamOn {
			fc = fc.WithUpstreamDefaults()
		}
	case !o.FlowControl.Enabled && upstreamOn:
		o.Warnings = append(o.Warnings, Warning{Flag: "--flow-control", Value: "false",
			Message: "Setting overrides the configuration",
			Reason:  "the flowControl feature gate (or " + upstreamFlowControlEnv + ") asks for the flow-control queue; --flow-control=false is given, so there is none"})
	}
	if !o.FlowControl.Enabled {
		if fc.Section {
			o.Warnings = append(o.Warnings, Warning{Flag: o.configSource,
				Reason: "flowControl has no effect: the flow-control queue is off (featureGates: [flowControl] or --flow-control turns it on)"})
		}
		return
	}
	for _, b := range []struct {
		key, flag string
		file      any
		set       bool
		apply     func()
	}{
		{"maxRequests", "max-requests", fc.MaxRequests, fc.MaxRequests != 0, func() { o.FlowControl.MaxLen = fc.MaxRequests }},
		{"defaultPriorityBand.maxRequests", "max-band-requests", fc.MaxBandRequests, fc.MaxBandRequests != 0, func() { o.FlowControl.MaxBandLen = fc.MaxBandRequests }},
		{"maxBytes", "max-bytes", fc.MaxBytes, fc.MaxBytes != 0, func() { o.FlowControl.MaxBytes = fc.MaxBytes }},
		{"defaultRequestTTL", "max-wait", fc.MaxWait, fc.MaxWait != 0, func() { o.FlowControl.MaxWait = fc.MaxWait }},
		{"defaultPriorityBand.orderingPolicyRef", "ordering", fc.Ordering, fc.Ordering != "", func() { o.FlowControl.Ordering = fc.Ordering }},
	} {
		if !b.set {
			continue
		}
		name := "flow-control-" + b.flag
		if !o.flagSet(name) {
			b.apply()
			continue
		}
		if given := o.fs.Lookup(name).Value.String(); given != fmt.Sprint(b.file) {
			o.Warnings = append(o.Warnings, Warning{Flag: o.configSource, Reason: fmt.Sprintf(
				"flowControl.%s %v has no effect: --%s %s is given", b.key, b.file, name, given)})
		}
	}
}

// flagSet reports whether the flag name was given.
func (o *Options) flagSet(name string) bool {
	set := false
	o.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// Validate reports settings that cannot work together.
func (o *Options) Validate() error {
	var errs []error
	if o.GRPCMaxConcurrentStreams > math.MaxUint32 {
		errs = append(errs, fmt.Errorf("--grpc-max-concurrent-streams %d is over HTTP/2's %d", o.GRPCMaxConcurrentStreams, uint32(math.MaxUint32)))
	}
	if err := portnum.CheckFlag("--kv-events-port", o.KVEventsPort, "KV events off"); err != nil {
		errs = append(errs, err)
	}
	if err := listenAddress(o.KVEventsListen); err != nil {
		errs = append(errs, fmt.Errorf("--kv-events-listen %q: %w", o.KVEventsListen, err))
	}
	if err := portnum.CheckFlag("--kv-events-replay-port", o.KVEventsReplayPort, "replay off"); err != nil {
		errs = append(errs, err)
	} else if o.KVEventsReplayPort > 0 && o.KVEventsPort == 0 {
		errs = append(errs, fmt.Errorf("--kv-events-replay-port %d needs --kv-events-port", o.KVEventsReplayPort))
	}
	if !(o.KVEventsOffloadWeight >= 0 && o.KVEventsOffloadWeight <= 1) {
		errs = append(errs, fmt.Errorf("--kv-events-offload-weight %v must be from 0 to 1", o.KVEventsOffloadWeight))
	}
	if o.KVEventsReplayTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--kv-events-replay-timeout %v must be positive", o.KVEventsReplayTimeout))
	}
	if fc := o.FlowControl; fc.Enabled {
		// The flags show the defaults: 0 was given, and would be taken for
		// the default without a word.
		for _, b := range []struct {
			name     string
			value    any
			positive bool
		}{
			{"max-requests", fc.MaxLen, fc.MaxLen > 0},
			{"max-band-requests", fc.MaxBandLen, fc.MaxBandLen > 0},
			{"max-bytes", fc.MaxBytes, fc.MaxBytes > 0},
			{"max-wait", fc.MaxWait, fc.MaxWait > 0},
		} {
			if !b.positive {
				errs = append(errs, fmt.Errorf("--flow-control-%s %v must be positive", b.name, b.value))
			}
		}
		if fc.Ordering != flowcontrol.OrderFCFS && fc.Ordering != flowcontrol.OrderDeadline {
			errs = append(errs, fmt.Errorf("--flow-control-ordering %q must be %s or %s", fc.Ordering, flowcontrol.OrderFCFS, flowcontrol.OrderDeadline))
		}
	}
	if o.TokenizeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--tokenize-timeout %v must be positive", o.TokenizeTimeout))
	}
	if o.ExtProcTransport != transportDirect && o.ExtProcTransport != transportGRPC {
		errs = append(errs, fmt.Errorf("--extproc-transport must be %s or %s, not %q", transportDirect, transportGRPC, o.ExtProcTransport))
	}
	if len(o.static) == 0 && o.PoolName == "" && o.EndpointSelector == "" {
		errs = append(errs, errors.New("one of --pool-name, --endpoint-selector or --static-endpoints is required"))
	}
	if o.PoolName != "" && o.EndpointSelector != "" {
		errs = append(errs, errors.New("--pool-name and --endpoint-selector exclude each other"))
	}
	if o.EndpointSelector != "" {
		if n := len(o.EndpointTargetPorts); n < 1 || n > 8 {
			errs = append(errs, fmt.Errorf("--endpoint-selector needs 1 to 8 --endpoint-target-ports, got %d", n))
		}
	}
	if o.HAMode != HAActiveActive && o.HAMode != HAActivePassive {
		errs = append(errs, fmt.Errorf("--ha-mode %q is not %s or %s", o.HAMode, HAActiveActive, HAActivePassive))
	}
	if len(o.static) > 0 && o.LeaderElection {
		errs = append(errs, errors.New("--ha-enable-leader-election needs a cluster, not --static-endpoints"))
	}
	for _, f := range []struct {
		name string
		port int
		zero string
	}{
		{"--grpc-port", o.GRPCPort, "one the system picks"},
		{"--grpc-health-port", o.GRPCHealthPort, "one the system picks"},
		{"--metrics-port", o.MetricsPort, "one the system picks"},
		{"--model-server-metrics-port", o.ModelServerMetricsPort, "the serving port"},
	} {
		if err := portnum.CheckFlag(f.name, f.port, f.zero); err != nil {
			errs = append(errs, err)
		}
	}
	if o.LeaderElectionRenewDeadline >= o.LeaderElectionLeaseDuration || o.LeaderElectionRetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("leader election needs 0 < --leader-election-retry-period and --leader-election-renew-deadline %s < --leader-election-lease-duration %s",
			o.LeaderElectionRenewDeadline, o.LeaderElectionLeaseDuration))
	}
	// client-go's own bound: a renewal may retry up to 1.2 retry periods late.
	if float64(o.LeaderElectionRenewDeadline) <= leaderelection.JitterFactor*float64(o.LeaderElectionRetryPeriod) {
		errs = append(errs, fmt.Errorf("leader election needs --leader-election-renew-deadline %s over %g × --leader-election-retry-period %s",
			o.LeaderElectionRenewDeadline, leaderelection.JitterFactor, o.LeaderElectionRetryPeriod))
	}
	if o.Fallbacks < 0 {
		errs = append(errs, fmt.Errorf("--fallbacks %d is negative", o.Fallbacks))
	}
	// A negative drain would cut every stream at SIGTERM, and could make
	// the manager's shutdown bound (the drain and 5 s) negative, which
	// controller-runtime takes for no bound at all.
	if o.DrainTimeout < 0 {
		errs = append(errs, fmt.Errorf("--drain-timeout %s is negative", o.DrainTimeout))
	}
	if o.MaxBodyBytes <= 0 {
		errs = append(errs, fmt.Errorf("--max-request-body-bytes %d must be positive", o.MaxBodyBytes))
	}
	if o.MaxBufferedBodyBytes < o.MaxBodyBytes {
		errs = append(errs, fmt.Errorf("--max-buffered-body-bytes %d must be at least --max-request-body-bytes %d", o.MaxBufferedBodyBytes, o.MaxBodyBytes))
	}
	if o.KeepaliveTime <= 0 || o.KeepaliveTimeout <= 0 || o.KeepaliveMinTime <= 0 {
		errs = append(errs, fmt.Errorf("--grpc-keepalive-time %s, --grpc-keepalive-timeout %s and --grpc-keepalive-min-time %s must be positive",
			o.KeepaliveTime, o.KeepaliveTimeout, o.KeepaliveMinTime))
	}
	if o.ClientCAPath != "" && !o.SecureServing {
		errs = append(errs, errors.New("--client-ca-path needs --secure-serving"))
	}
	if o.PrefixIndexMaxBlocks < 0 {
		errs = append(errs, fmt.Errorf("--prefix-index-max-blocks %d is negative", o.PrefixIndexMaxBlocks))
	}
	if o.RefreshMetricsInterval <= 0 {
		errs = append(errs, fmt.Errorf("--refresh-metrics-interval %s must be positive", o.RefreshMetricsInterval))
	}
	return errors.Join(errs...)
}

// listenAddress checks a --kv-events-listen address: empty, or host:port
// with a port (the host empty for every address).
func listenAddress(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port, e.g. :5557: %w", err)
	}
	_, err = portnum.Parse(port)
	return err
}
