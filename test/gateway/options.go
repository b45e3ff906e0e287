package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/utils/clock"
)

// FailureMode says what happens when the ext_proc stream fails, like Envoy's
// failure_mode_allow.
type FailureMode string

const (
	// FailClose answers the client with an error (Envoy's default).
	FailClose FailureMode = "FailClose"
	// FailOpen continues without processing while that is still possible.
	FailOpen FailureMode = "FailOpen"
)

// ParseFailureMode reads a failure mode name.
func ParseFailureMode(s string) (FailureMode, error) {
	switch FailureMode(s) {
	case FailClose, FailOpen:
		return FailureMode(s), nil
	}
	return "", fmt.Errorf("unknown failure mode %q (want %s or %s)", s, FailClose, FailOpen)
}

// RetryPolicy is the router's retry policy for the route to the pool.
type RetryPolicy struct {
	// MaxAttempts bounds the upstream attempts, the first one included.
	MaxAttempts int
	// On5xx retries on a 5xx response and on any failure before response headers
	// (Envoy's "5xx" retry_on, which includes connect failures and resets).
	On5xx bool
	// OnConnectFailure retries when the connection cannot be established.
	OnConnectFailure bool
}

// Default values, chosen to match Envoy's where Envoy has one.
const (
	DefaultMessageTimeout = 200 * time.Millisecond
	DefaultChunkSize      = 16 << 10
	DefaultConnectTimeout = 5 * time.Second
	DefaultCloseGrace     = 5 * time.Second
)

// DefaultRetryPolicy walks up to three endpoints of the picker's list on connect
// failures and 5xx answers, the retry policy recommended for InferencePool routes.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 3, On5xx: true, OnConnectFailure: true}

type options struct {
	tls             *tls.Config
	messageTimeout  time.Duration
	failureMode     FailureMode
	defaultUpstream string
	chunkSize       int
	retry           RetryPolicy
	connectTimeout  time.Duration
	closeGrace      time.Duration
	allowCL         bool
	clock           clock.WithTicker
	onRecord        func(Record)
	subsetHint      func(*http.Request) ([]string, bool)
	cluster         PickerCluster
	headerRouting   bool
	appProtocol     string
}

func defaultOptions() options {
	return options{
		messageTimeout: DefaultMessageTimeout,
		failureMode:    FailClose,
		chunkSize:      DefaultChunkSize,
		retry:          DefaultRetryPolicy,
		connectTimeout: DefaultConnectTimeout,
		closeGrace:     DefaultCloseGrace,
		clock:          clock.RealClock{},
		cluster:        DefaultPickerCluster,
	}
}

// Option configures a Gateway.
type Option func(*options)

// WithPickerTLS dials the picker over TLS with this configuration.
func WithPickerTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithMessageTimeout sets how long the gateway waits for the picker while a reply
// is due, measured from the last message sent or received. Zero disables the
// timer, which is what Envoy does in FULL_DUPLEX_STREAMED mode.
func WithMessageTimeout(d time.Duration) Option { return func(o *options) { o.messageTimeout = d } }

// WithFailureMode sets FailClose or FailOpen.
func WithFailureMode(m FailureMode) Option { return func(o *options) { o.failureMode = m } }

// WithDefaultUpstream sets the ip:port a request goes to when it carries no
// destination (the cluster's fallback policy) or when FailOpen skips processing.
func WithDefaultUpstream(addr string) Option { return func(o *options) { o.defaultUpstream = addr } }

// WithChunkSize sets the largest request_body and response_body chunk sent to the picker.
func WithChunkSize(n int) Option { return func(o *options) { o.chunkSize = n } }

// WithRetryPolicy sets the router's retry policy.
func WithRetryPolicy(p RetryPolicy) Option { return func(o *options) { o.retry = p } }

// WithConnectTimeout bounds each upstream connection attempt.
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.connectTimeout = d } }

// WithCloseGrace sets how long a half-closed ext_proc stream may take to end
// before the gateway cancels it.
func WithCloseGrace(d time.Duration) Option { return func(o *options) { o.closeGrace = d } }

// WithAllowContentLength keeps content-length on forwarded messages, like Envoy's
// allow_content_length_header; a content-length the picker sets is then applied.
func WithAllowContentLength(allow bool) Option { return func(o *options) { o.allowCL = allow } }

// WithHeaderRouting routes on the destination header alone, ignoring the
// envoy.lb metadata, as an ORIGINAL_DST cluster with use_http_header does.
// By default the metadata comes first and the header only without it, as
// Envoy's override_host policy configured with both sources in that order.
func WithHeaderRouting() Option { return func(o *options) { o.headerRouting = true } }

// WithClock injects the clock used for timers and for the timings in records.
func WithClock(c clock.WithTicker) Option { return func(o *options) { o.clock = c } }

// WithRecorder registers a callback that receives one Record per finished request.
func WithRecorder(f func(Record)) Option { return func(o *options) { o.onRecord = f } }

// WithSubsetHint sets the subset hint of each request from a function; when it
// reports ok the list is sent as envoy.lb.subset_hint metadata. The
// SubsetHintHeader request header, when present, takes precedence.
func WithSubsetHint(f func(*http.Request) (endpoints []string, ok bool)) Option {
	return func(o *options) { o.subsetHint = f }
}

// TLSConfig builds the client TLS configuration for the picker connection from an
// optional CA bundle file and an insecure-skip-verify switch.
func TLSConfig(caFile string, insecureSkipVerify bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecureSkipVerify} //nolint:gosec // test harness switch, off unless asked for
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read picker CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("picker CA %s: no certificate found", caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}
