package kvevents

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/go-logr/logr"
)

// SubListener is a ZeroMQ SUB socket bound to a TCP address: PUB (or XPUB)
// sockets connect to it, as a vLLM server does whose --kv-events-config
// endpoint names a host rather than "*". Each connection is handshaken and
// subscribed on its own goroutine, then given to the handler, so that a
// peer that stalls or speaks wrongly holds up no other. Connections past
// its bounds (WithMaxConns) are closed as they come.
type SubListener struct {
	srv     *server
	sub     []byte // the subscription message
	handle  func(*Sub)
	timeout time.Duration
}

// ListenOption configures a SubListener.
type ListenOption func(*SubListener)

// WithHandshakeTimeout bounds a connection's handshake; a peer that has not
// finished it by then is dropped. The default is DefaultHandshakeTimeout.
func WithHandshakeTimeout(d time.Duration) ListenOption {
	return func(l *SubListener) { l.timeout = d }
}

// WithLog sets where dropped and refused connections are logged, with
// their reason.
func WithLog(log logr.Logger) ListenOption {
	return func(l *SubListener) { l.srv.log = log }
}

// WithMaxConns bounds the connections open at once, all told and from one
// remote IP; a connection past either is closed as it comes (logged at
// most every 10 s). The defaults are DefaultMaxConns and
// DefaultMaxConnsPerIP.
func WithMaxConns(total, perIP int) ListenOption {
	return func(l *SubListener) { l.srv.maxConns, l.srv.maxPerIP = total, perIP }
}

// DefaultHandshakeTimeout bounds a connecting peer's handshake when no
// WithHandshakeTimeout is given.
const DefaultHandshakeTimeout = 5 * time.Second

// DefaultMaxConns and DefaultMaxConnsPerIP bound a SubListener's
// connections when no WithMaxConns is given: per IP, twice the 64 engines
// of a data-parallel deployment whose events a picker follows, so that a
// pod whose every engine reconnects while its old connections linger is
// still taken.
const (
	DefaultMaxConns      = 4096
	DefaultMaxConnsPerIP = 128
)

// ListenSub listens on addr ("host:port"; port 0 picks one) and calls
// handle, on a goroutine of its own, with each connection of a PUB or XPUB
// peer once it is handshaken and subscribed to the messages whose first
// frame begins with topic (all when empty). The connection is closed when
// handle returns; handle should read it with Recv until that fails.
func ListenSub(addr string, topic []byte, handle func(*Sub), opts ...ListenOption) (*SubListener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return serveSub(ln, topic, handle, opts...), nil
}

// serveSub is ListenSub on ln.
func serveSub(ln net.Listener, topic []byte, handle func(*Sub), opts ...ListenOption) *SubListener {
	l := &SubListener{
		sub:     appendFrame(nil, 0, append([]byte{1}, topic...)),
		handle:  handle,
		timeout: DefaultHandshakeTimeout,
	}
	l.srv = newServer(ln, l.serve, logr.Discard())
	l.srv.maxConns, l.srv.maxPerIP = DefaultMaxConns, DefaultMaxConnsPerIP
	for _, o := range opts {
		o(l)
	}
	l.srv.start()
	return l
}

// Addr returns the address listened on.
func (l *SubListener) Addr() net.Addr { return l.srv.ln.Addr() }

// handshakeBuffer is the read buffer of a connection in its handshake, so
// that a peer that connects and says nothing holds that much rather than
// the 64 KiB its messages are read through once it is subscribed.
const handshakeBuffer = 256

// serve handshakes conn, subscribes, and hands it to the handler.
func (l *SubListener) serve(conn net.Conn) {
	r := bufio.NewReaderSize(conn, handshakeBuffer)
	_ = conn.SetDeadline(time.Now().Add(l.timeout))
	err := handshake(conn, r, "SUB", "PUB", "XPUB")
	if err == nil {
		_, err = conn.Write(l.sub)
	}
	if err != nil {
		l.srv.log.Info("KV-event publisher dropped: handshake failed", "peer", conn.RemoteAddr().String(), "err", fmt.Errorf("within %v: %w", l.timeout, err))
		return
	}
	_ = conn.SetDeadline(time.Time{})
	l.handle(&Sub{conn: conn, r: bufio.NewReaderSize(rest(r, conn), 64<<10)})
}

// rest is what is left to read of conn after r: the bytes r holds, then
// conn's own.
func rest(r *bufio.Reader, conn net.Conn) io.Reader {
	n := r.Buffered()
	if n == 0 {
		return conn
	}
	held, _ := r.Peek(n)
	return io.MultiReader(bytes.NewReader(bytes.Clone(held)), conn)
}

// Close stops listening, closes every connection, and returns once the
// handlers have returned. Closing again does nothing.
func (l *SubListener) Close() error {
	_, err := l.srv.close()
	return err
}

// RemoteAddr returns the address of the connection's peer.
func (s *Sub) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }
