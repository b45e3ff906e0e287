package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Gateway is the Envoy stand-in. It is an http.Handler; Serve runs it on a listener.
type Gateway struct {
	o         options
	pickers   *pickers
	transport *http.Transport
	h2c       *http.Transport // upstream HTTP/2 cleartext (WithAppProtocol, gRPC)
	c         counters

	base       context.Context
	cancelBase context.CancelFunc
	closers    sync.WaitGroup
}

var _ http.Handler = (*Gateway)(nil)

// New returns a gateway that sends every request through the ext_proc server at
// picker (host:port).
func New(picker string, opts ...Option) (*Gateway, error) {
	return NewCluster([]string{picker}, opts...)
}

// reconnect makes a picker connection retry soon after a failure, as Envoy
// opens a new connection for the next stream, instead of gRPC's backoff of
// up to two minutes, which would leave a restarted replica unused.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1, MaxDelay: 50 * time.Millisecond},
	MinConnectTimeout: time.Second,
}

// NewCluster returns a gateway whose ext_proc service is the cluster of the
// pickers' addresses (host:port), several replicas of one picker; see
// cluster.go.
func NewCluster(pickerAddrs []string, opts ...Option) (*Gateway, error) {
	if len(pickerAddrs) == 0 {
		return nil, errors.New("no picker address")
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if _, err := ParseFailureMode(string(o.failureMode)); err != nil {
		return nil, err
	}
	if o.chunkSize <= 0 {
		return nil, fmt.Errorf("chunk size %d: must be positive", o.chunkSize)
	}
	if o.retry.MaxAttempts < 1 {
		o.retry.MaxAttempts = 1
	}
	if o.defaultUpstream != "" {
		if _, err := parseEndpoint(o.defaultUpstream); err != nil {
			return nil, fmt.Errorf("default upstream: %w", err)
		}
	}
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	}
	g := &Gateway{o: o}
	g.pickers = &pickers{cfg: o.cluster, now: o.clock.Now, c: &g.c}
	for _, addr := range pickerAddrs {
		conn, err := grpc.NewClient(addr, append(EnvoyDialOptions(), grpc.WithTransportCredentials(creds), grpc.WithConnectParams(reconnect))...)
		if err != nil {
			_ = g.pickers.close()
			return nil, fmt.Errorf("picker client %s: %w", addr, err)
		}
		g.pickers.hosts = append(g.pickers.hosts, &pickerHost{addr: addr, conn: conn, client: extprocv3.NewExternalProcessorClient(conn)})
	}
	base, cancel := context.WithCancel(context.Background())
	if hc := o.cluster.HealthCheck; hc != nil {
		if err := g.pickers.startChecks(hc, o.clock, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			cancel()
			_ = g.pickers.close()
			return nil, err
		}
	}
	*g = Gateway{
		o:       o,
		pickers: g.pickers,
		transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: o.connectTimeout}).DialContext,
			DisableCompression:  true,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
		},
		h2c: &http.Transport{
			DialContext:        (&net.Dialer{Timeout: o.connectTimeout}).DialContext,
			DisableCompression: true,
			IdleConnTimeout:    90 * time.Second,
			Protocols:          h2cOnly(),
		},
		base:       base,
		cancelBase: cancel,
	}
	return g, nil
}

// Counters returns the running totals.
func (g *Gateway) Counters() Counters { return g.c.snapshot() }

// ServeHTTP handles one downstream request.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.c.requests.Add(1)
	f := &flow{g: g, w: w, r: r, start: g.o.clock.Now(), grpc: isGRPC(r)}
	f.rec.Method, f.rec.Path = r.Method, r.URL.RequestURI()
	defer f.finish()
	f.serve(r.Context())
	if !f.wroteHeader && f.clientGone() {
		// Envoy resets a downstream that went away before it was answered.
		// Returning would let net/http write an empty 200, which a client that
		// only half-closed (say, after cutting its declared body short) reads.
		panic(http.ErrAbortHandler)
	}
}

// Serve serves HTTP on lis until ctx ends, then shuts the server down.
func (g *Gateway) Serve(ctx context.Context, lis net.Listener) error {
	// HTTP/1.1 and HTTP/2 cleartext with prior knowledge, which is how gRPC
	// clients talk to a plaintext listener.
	protocols := h2cOnly()
	protocols.SetHTTP1(true)
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, Protocols: protocols}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdown); err != nil {
			_ = srv.Close()
		}
	}()
	err := srv.Serve(lis)
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serve: %w", err)
}

// Close cancels every ext_proc stream still open, waits for their closers and
// releases the picker connection and idle upstream connections.
func (g *Gateway) Close() error {
	g.cancelBase()
	g.closers.Wait()
	g.transport.CloseIdleConnections()
	g.h2c.CloseIdleConnections()
	return g.pickers.close()
}

// closeStream ends a stream whose processing finished: half-close, give the
// picker the grace period to end its side, then cancel.
func (g *Gateway) closeStream(x *exchange, cancel context.CancelFunc) {
	defer g.closers.Done()
	defer cancel()
	if err := x.closeSend(); err != nil {
		return
	}
	grace := g.o.clock.NewTimer(g.o.closeGrace)
	defer grace.Stop()
	select {
	case <-x.done:
	case <-grace.C():
	case <-g.base.Done():
	}
}

// h2cOnly is the protocol set of HTTP/2 cleartext alone.
func h2cOnly() *http.Protocols {
	p := &http.Protocols{}
	p.SetUnencryptedHTTP2(true)
	return p
}

// upstream returns the transport of a request: HTTP/2 cleartext for an h2c
// pool or a gRPC request, HTTP/1.1 otherwise.
func (g *Gateway) upstream(grpcRequest bool) *http.Transport {
	if grpcRequest || g.o.appProtocol == AppProtocolH2C {
		return g.h2c
	}
	return g.transport
}
