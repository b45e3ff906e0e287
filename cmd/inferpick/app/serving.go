package app

import (
	"crypto/tls"
	"net/http"
	"net/http/pprof"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
)

// warningMessage is the message of a no-effect warning.
const warningMessage = "Warning: accepted setting has no effect"

// logWarnings logs, once each, the flags and configuration that were
// accepted but have no effect.
func logWarnings(log logr.Logger, ws []Warning) {
	for _, w := range ws {
		log.Info(warningMessage, "flag", w.Flag, "value", w.Value, "reason", w.Reason)
	}
}

// extProcOptions are the ext_proc server's message size limits.
func extProcOptions(o *Options) []grpc.ServerOption {
	var opts []grpc.ServerOption
	if o.GRPCMaxRecvMsgSize.raw != "" {
		opts = append(opts, grpc.MaxRecvMsgSize(o.GRPCMaxRecvMsgSize.n))
	}
	if o.GRPCMaxSendMsgSize.raw != "" {
		opts = append(opts, grpc.MaxSendMsgSize(o.GRPCMaxSendMsgSize.n))
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
