package app

import (
	"crypto/tls"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/pprof"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/klog/v2"

	"github.com/inferpick/inferpick/controllers"
	"github.com/inferpick/inferpick/picker/extproc"
	"github.com/inferpick/inferpick/picker/health"
)

// selectorOptions are --endpoint-selector, --endpoint-target-ports and the
// namespace.
func (o *Options) selectorOptions() controllers.SelectorOptions {
	ports := make([]int32, 0, len(o.EndpointTargetPorts))
	for _, p := range o.EndpointTargetPorts {
		ports = append(ports, int32(p)) //nolint:gosec // validated to be a port
	}
	return controllers.SelectorOptions{Namespace: o.PoolNamespace, Selector: o.selector, Ports: ports,
		ContextLengthLabel: contextLengthLabel(o.Policy), FilterLabels: o.Policy.LabelKeys()}
}

// leaderElectionID names the lease: after the pool, or after a hash of the
// endpoint selector.
func (o *Options) leaderElectionID() string {
	if o.selector == nil {
		return "inferpick-" + o.PoolName
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(o.selector.String()))
	return fmt.Sprintf("inferpick-selector-%08x", h.Sum32())
}

// logServing says what the picker serves in a cluster.
func logServing(log logr.Logger, o *Options) {
	if o.selector != nil {
		log.Info("Serving pods by label", "namespace", o.PoolNamespace, "selector", o.selector.String(), "ports", o.EndpointTargetPorts.String())
		return
	}
	log.Info("Serving InferencePool", "pool", klog.KRef(o.PoolNamespace, o.PoolName))
}

// warningMessage is the message of a no-effect warning.
const warningMessage = "Warning: accepted setting has no effect"

// upstreamMessage is the message of the warning that the upstream picker
// reads a flag's value differently.
const upstreamMessage = "Warning: the upstream picker reads this flag differently"

// deprecatedMessage is the message of a setting upstream deprecates.
const deprecatedMessage = "Warning: setting deprecated upstream"

// staleMessage is the message of the warning that metrics go stale between
// scrapes.
const staleMessage = "Warning: scraped metrics go stale before the next scrape"

// kvListenMessage is logged when servers that connect with their KV-cache
// events reach one replica of several.
const kvListenMessage = "Warning: each server's KV-cache events reach one replica only"

// logWarnings logs, once each, the flags and configuration that were
// accepted but have no effect.
func logWarnings(log logr.Logger, ws []Warning) {
	for _, w := range ws {
		msg := w.Message
		if msg == "" {
			msg = warningMessage
		}
		log.Info(msg, "flag", w.Flag, "value", w.Value, "reason", w.Reason)
	}
}

// The ext_proc transports (--extproc-transport).
const (
	transportDirect = "direct"
	transportGRPC   = "grpc"
)

// extProcServer is the ext_proc server over the chosen transport, over TLS
// when tlsCfg is set. It answers gRPC health checks too, as hc does on the
// health port, for gateways whose health checker probes the ext_proc port.
func extProcServer(o *Options, srv *extproc.Server, tlsCfg *tls.Config, hc *health.Checker) grpcService {
	if o.ExtProcTransport == transportGRPC {
		opts := extProcOptions(o)
		if tlsCfg != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
		}
		gs := grpc.NewServer(opts...)
		extprocv3.RegisterExternalProcessorServer(gs, srv)
		hc.RegisterCheck(gs)
		return gs
	}
	return extproc.NewDirect(srv, extproc.DirectOptions{
		TLS:              tlsCfg,
		KeepaliveTime:    o.KeepaliveTime,
		KeepaliveTimeout: o.KeepaliveTimeout,
		KeepaliveMinTime: o.KeepaliveMinTime,
		MaxRecvMsgSize:   o.GRPCMaxRecvMsgSize.n,
		MaxSendMsgSize:   o.GRPCMaxSendMsgSize.n,

		MaxConcurrentStreams: uint32(o.GRPCMaxConcurrentStreams),
		Health:               hc.Status,
	})
}

// extProcOptions are grpc-go's ext_proc server options: keepalive, message
// sizes and the stream cap.
func extProcOptions(o *Options) []grpc.ServerOption {
	opts := append(extproc.ServerOptions(),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: o.KeepaliveTime, Timeout: o.KeepaliveTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: o.KeepaliveMinTime, PermitWithoutStream: true}),
	)
	if o.GRPCMaxRecvMsgSize.raw != "" {
		opts = append(opts, grpc.MaxRecvMsgSize(o.GRPCMaxRecvMsgSize.n))
	}
	if o.GRPCMaxSendMsgSize.raw != "" {
		opts = append(opts, grpc.MaxSendMsgSize(o.GRPCMaxSendMsgSize.n))
	}
	if o.GRPCMaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(uint32(o.GRPCMaxConcurrentStreams)))
	}
	return opts
}

// applyTLSFlags sets --tls-min-version and --tls-cipher-suites on the
// ext_proc TLS configuration.
func applyTLSFlags(cfg *tls.Config, o *Options) {
	cfg.MinVersion = o.tlsMinVersion
	cfg.CipherSuites = o.tlsCipherSuites
}

// pprofHandlers are Go's profiling handlers under /debug/pprof/, when
// --enable-pprof is set.
func pprofHandlers(o *Options) map[string]http.Handler {
	if !o.EnablePprof {
		return nil
	}
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}
