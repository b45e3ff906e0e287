package scrape

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// Defaults of a Scraper.
const (
	// DefaultInterval matches the upstream endpoint picker's
	// --refresh-metrics-interval.
	DefaultInterval = 50 * time.Millisecond
	// DefaultPath is where model servers expose their metrics.
	DefaultPath = "/metrics"
	// DefaultMaxBodySize caps one /metrics body; a real vLLM page is ~20 KiB.
	DefaultMaxBodySize = 4 << 20
	// maxTimeout bounds the default per-scrape timeout.
	maxTimeout = time.Second
)

// Option configures a Scraper.
type Option func(*options)

type options struct {
	interval       time.Duration
	modelsInterval time.Duration
	timeout        time.Duration // 0: min(interval, 1s)
	path           string
	metricsPort    uint16
	maxBody        int64
	clock          clock.PassiveClock
	client         *http.Client
	names          *Names
	schema         *Schema // compiled names; the Auto preset's by default
	log            logr.Logger
}

// WithInterval sets the time between two scrapes of one worker
// (--refresh-metrics-interval). Default 50ms.
func WithInterval(d time.Duration) Option { return func(o *options) { o.interval = d } }

// WithModelsInterval sets how often each worker's /v1/models is read for
// the models it serves (base models and LoRA adapters with their parent).
// Default DefaultModelsInterval; 0 or less never reads it, leaving the
// model names on the metrics.
func WithModelsInterval(d time.Duration) Option { return func(o *options) { o.modelsInterval = d } }

// WithTimeout bounds one scrape: connect, headers and body. Default
// min(interval, 1s).
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithPath sets the HTTP path of the metrics page. Default "/metrics".
func WithPath(p string) Option { return func(o *options) { o.path = p } }

// WithMetricsPort scrapes this port on each worker's IP instead of the
// port it serves requests on. 0 (the default) means the serving port.
func WithMetricsPort(port uint16) Option { return func(o *options) { o.metricsPort = port } }

// WithMaxBodySize caps a /metrics body; a bigger one is a failed scrape.
// Default 4 MiB.
func WithMaxBodySize(n int64) Option { return func(o *options) { o.maxBody = n } }

// WithNames sets the series read from each page, e.g. a Preset. Default:
// the Auto preset, vLLM's and SGLang's names.
func WithNames(n Names) Option { return func(o *options) { o.names = &n } }

// WithClock sets the clock that stamps scrapes and measures staleness.
func WithClock(c clock.PassiveClock) Option { return func(o *options) { o.clock = c } }

// WithLog sets the logger that gets a line when a worker's scrapes start
// failing and one when they work again, none per failure. Default: none.
func WithLog(l logr.Logger) Option { return func(o *options) { o.log = l } }

// WithHTTPClient replaces the Scraper's own client. The Scraper then leaves
// the client's idle connections alone when it stops.
func WithHTTPClient(c *http.Client) Option { return func(o *options) { o.client = c } }

func (o *options) complete() error {
	var errs []error
	if o.interval <= 0 {
		errs = append(errs, fmt.Errorf("interval %v is not positive", o.interval))
	}
	if o.timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %v is negative", o.timeout))
	}
	if o.timeout == 0 {
		o.timeout = min(o.interval, maxTimeout)
	}
	if o.maxBody <= 0 {
		errs = append(errs, fmt.Errorf("max body size %d is not positive", o.maxBody))
	}
	if !strings.HasPrefix(o.path, "/") {
		errs = append(errs, fmt.Errorf("path %q does not start with /", o.path))
	}
	if o.clock == nil {
		o.clock = clock.RealClock{}
	}
	if o.log.GetSink() == nil {
		o.log = logr.Discard()
	}
	o.schema = defaultSchema
	if o.names != nil {
		s, err := NewSchema(*o.names)
		if err != nil {
			errs = append(errs, fmt.Errorf("metric names: %w", err))
		}
		o.schema = s
	}
	return errors.Join(errs...)
}

// newClient returns the client the pollers share: keep-alive connections,
// a couple idle per worker, no limit on the total so that a large pool does
// not churn connections, no proxy, and no compression (the pages are small
// and sit one hop away; gzip would cost CPU on both ends every 50ms).
func newClient(interval time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext:            dialer.DialContext,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        max(30*time.Second, 2*interval),
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}}
}
