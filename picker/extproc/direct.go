package extproc

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// DirectServer serves the ext_proc service over HTTP/2 with a transport of
// its own instead of grpc-go's. Each connection is read by one goroutine,
// which decodes a stream's message, runs the exchange's step for it and
// writes the replies into the connection's write buffer; it flushes that
// buffer once it has handled every frame the gateway had sent. A message
// thus costs no hand-off between goroutines, and the replies to messages
// that arrived together leave in one write.
//
// With a flow-control queue (Options.Queue), where admission may wait, each
// stream's messages are handled on a goroutine of the stream's own, so a
// waiting request holds up no other stream.
//
// It speaks what a gRPC client of the one method
// /envoy.service.ext_proc.v3.ExternalProcessor/Process needs: uncompressed
// messages, status in trailers, flow control both ways, keepalive pings,
// and GOAWAY on a graceful stop.
type DirectServer struct {
	s    *Server
	opts DirectOptions

	mu        sync.Mutex
	listeners map[net.Listener]bool
	conns     map[*directConn]bool
	stopping  bool
	draining  bool
	connsDone sync.WaitGroup
}

// DirectOptions are the DirectServer's settings; a zero value is gRPC's
// defaults without keepalive pings.
type DirectOptions struct {
	// TLS, when set, serves every connection over TLS (ALPN h2).
	TLS *tls.Config
	// KeepaliveTime is how long a connection may stay silent before the
	// server pings it; KeepaliveTimeout how long it then waits for any
	// frame before closing the connection, which cancels its streams.
	// Zero or less: no pings. KeepaliveTimeout (20 s when not set) is also
	// how long a write may wait on a client that reads nothing before the
	// connection is closed.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// KeepaliveMinTime is the shortest interval between a client's pings
	// that the server tolerates: after more than maxPingStrikes pings
	// sooner than that, with no reply sent between them, it closes the
	// connection with GOAWAY ENHANCE_YOUR_CALM ("too_many_pings").
	KeepaliveMinTime time.Duration
	// MaxRecvMsgSize and MaxSendMsgSize bound a message's size; zero is
	// gRPC's defaults (4 MiB received, no bound sent).
	MaxRecvMsgSize, MaxSendMsgSize int
	// MaxConcurrentStreams, when positive, is announced to every client
	// (SETTINGS_MAX_CONCURRENT_STREAMS); a stream opened beyond it is
	// refused (REFUSED_STREAM) before any work. Zero: no limit, as in gRPC.
	MaxConcurrentStreams uint32
	// Health, when set, answers gRPC health checks
	// (/grpc.health.v1.Health/Check) on the ext_proc port, for gateways
	// whose health checker probes the ext_proc cluster's own endpoints.
	Health HealthChecker
}

// defaultMaxRecvMsgSize is gRPC's default bound on a received message.
const defaultMaxRecvMsgSize = 4 << 20

// ErrDirectServerStopped is returned by Serve after Stop or GracefulStop.
var ErrDirectServerStopped = errors.New("ext_proc server stopped")

// NewDirect returns a DirectServer for s.
func NewDirect(s *Server, opts DirectOptions) *DirectServer {
	if opts.MaxRecvMsgSize <= 0 {
		opts.MaxRecvMsgSize = defaultMaxRecvMsgSize
	}
	if opts.MaxSendMsgSize <= 0 {
		opts.MaxSendMsgSize = int(^uint32(0) >> 1)
	}
	if opts.TLS != nil {
		opts.TLS = withH2(opts.TLS)
		if get := opts.TLS.GetConfigForClient; get != nil {
			opts.TLS.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				cfg, err := get(hello)
				if cfg == nil || err != nil {
					return cfg, err
				}
				return withH2(cfg), nil
			}
		}
	}
	if opts.KeepaliveTimeout <= 0 {
		opts.KeepaliveTimeout = defaultKeepaliveTimeout
	}
	return &DirectServer{s: s, opts: opts, listeners: map[net.Listener]bool{}, conns: map[*directConn]bool{}}
}

// withH2 is a copy of cfg that negotiates HTTP/2 by ALPN, as gRPC clients
// require.
func withH2(cfg *tls.Config) *tls.Config {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{http2.NextProtoTLS}
	return cfg
}

// Serve accepts connections on lis until Stop or GracefulStop, after which
// it returns nil; any other failure to accept is returned.
func (d *DirectServer) Serve(lis net.Listener) error {
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		_ = lis.Close()
		return ErrDirectServerStopped
	}
	d.listeners[lis] = true
	d.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := lis.Accept()
		if err != nil {
			d.mu.Lock()
			stopping := d.stopping
			d.mu.Unlock()
			if stopping {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			_ = lis.Close()
			return fmt.Errorf("accept: %w", err)
		}
		delay = 0
		d.mu.Lock()
		if d.stopping {
			d.mu.Unlock()
			_ = nc.Close()
			continue
		}
		c := newDirectConn(d, nc)
		d.conns[c] = true
		if d.draining {
			c.goAway()
		}
		d.connsDone.Add(1)
		d.mu.Unlock()
		go c.serve()
	}
}

// GracefulStop stops accepting connections, tells every client with
// GOAWAY to open no more streams, and returns once every stream has ended.
func (d *DirectServer) GracefulStop() {
	d.mu.Lock()
	d.stopping, d.draining = true, true
	d.closeListeners()
	conns := make([]*directConn, 0, len(d.conns))
	for c := range d.conns {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	// Outside d.mu: a connection whose write waits on a client that reads
	// nothing holds its own lock until the write times out, and a Stop
	// meanwhile must not wait for that.
	for _, c := range conns {
		c.goAway()
	}
	d.connsDone.Wait()
}

// Stop closes every listener and connection at once; each open stream's
// request is released as cancelled. It returns when every connection's
// reader has ended.
func (d *DirectServer) Stop() {
	d.mu.Lock()
	d.stopping = true
	d.closeListeners()
	for c := range d.conns {
		_ = c.nc.Close()
	}
	d.mu.Unlock()
	d.connsDone.Wait()
}

func (d *DirectServer) closeListeners() {
	for l := range d.listeners {
		_ = l.Close()
	}
	clear(d.listeners)
}

func (d *DirectServer) forget(c *directConn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
	d.connsDone.Done()
}

// Buffer sizes of a connection: a read takes in several frames (or a body
// chunk) at once, and replies of several streams gather before a write.
const (
	directReadBuffer  = 64 << 10
	directWriteBuffer = 64 << 10
)

// handshakeTimeout bounds the TLS handshake and the client's preface, as
// gRPC's default connection timeout does.
const handshakeTimeout = 120 * time.Second

func newDirectConn(d *DirectServer, nc net.Conn) *directConn {
	if d.opts.TLS != nil {
		nc = tls.Server(nc, d.opts.TLS)
	}
	c := &directConn{
		d:          d,
		nc:         nc,
		streams:    map[uint32]*directStream{},
		health:     map[uint32]*healthCall{},
		peerWindow: initialWindow,
		sendWindow: initialWindow,
		maxFrame:   initialMaxFrame,
		inline:     d.s.opts.Queue == nil && d.s.opts.Locator == nil,
	}
	c.br = bufio.NewReaderSize(nc, directReadBuffer)
	c.bw = bufio.NewWriterSize(&c.out, directWriteBuffer)
	c.out.c = c
	c.fr = http2.NewFramer(c.bw, c.br)
	// The server's SETTINGS leave SETTINGS_MAX_FRAME_SIZE at its initial
	// value: a larger frame is a connection error, read no further than its
	// header (the framer would otherwise keep a buffer of its size).
	c.fr.SetMaxReadFrameSize(initialMaxFrame)
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// connWriter is the connection under its write buffer: a failed write
// closes the connection, so that its reader ends and releases its streams.
// A write fails when it waits longer than the keepalive timeout on a client
// that reads nothing: the deadline is moved on at most every quarter of it,
// so that a write gets between three quarters of the timeout and all of it.
type connWriter struct {
	c       *directConn
	renewAt time.Time // when the write deadline is next moved on
}

func (w *connWriter) Write(p []byte) (int, error) {
	timeout := w.c.d.opts.KeepaliveTimeout
	if now := time.Now(); !now.Before(w.renewAt) {
		_ = w.c.nc.SetWriteDeadline(now.Add(timeout))
		w.renewAt = now.Add(timeout / 4)
	}
	n, err := w.c.nc.Write(p)
	if err != nil && w.c.werr == nil {
		w.c.werr = err
		_ = w.c.nc.Close()
	}
	return n, err
}

// io.Writer check.
var _ io.Writer = (*connWriter)(nil)
