package kvevents

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// SubListener is a ZeroMQ SUB socket bound to a TCP address: PUB (or XPUB)
// sockets connect to it, as a vLLM server does whose --kv-events-config
// endpoint names a host rather than "*". Each connection is handshaken and
// subscribed on its own goroutine, then given to the handler, so that a
// peer that stalls or speaks wrongly holds up no other.
type SubListener struct {
	ln      net.Listener
	sub     []byte // the subscription message
	handle  func(*Sub)
	timeout time.Duration
	log     logr.Logger
	wg      sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// ListenOption configures a SubListener.
type ListenOption func(*SubListener)

// WithHandshakeTimeout bounds a connection's handshake; a peer that has not
// finished it by then is dropped. The default is DefaultHandshakeTimeout.
func WithHandshakeTimeout(d time.Duration) ListenOption {
	return func(l *SubListener) { l.timeout = d }
}

// WithLog sets where dropped connections are logged, with their reason.
func WithLog(log logr.Logger) ListenOption {
	return func(l *SubListener) { l.log = log }
}

// DefaultHandshakeTimeout bounds a connecting peer's handshake when no
// WithHandshakeTimeout is given.
const DefaultHandshakeTimeout = 5 * time.Second

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
	l := &SubListener{
		ln:      ln,
		sub:     appendFrame(nil, 0, append([]byte{1}, topic...)),
		handle:  handle,
		timeout: DefaultHandshakeTimeout,
		log:     logr.Discard(),
		conns:   map[net.Conn]struct{}{},
	}
	for _, o := range opts {
		o(l)
	}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// Addr returns the address listened on.
func (l *SubListener) Addr() net.Addr { return l.ln.Addr() }

func (l *SubListener) accept() {
	defer l.wg.Done()
	var wait time.Duration
	for {
		conn, err := l.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of file descriptors, say: wait, longer each time in
			// a row, rather than stop taking publishers for good.
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			l.log.Error(err, "Accepting a KV-event publisher failed", "retryIn", wait)
			time.Sleep(wait)
			continue
		}
		wait = 0
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = conn.Close()
			return
		}
		l.conns[conn] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go l.serve(conn)
	}
}

// serve handshakes conn, subscribes, and hands it to the handler.
func (l *SubListener) serve(conn net.Conn) {
	defer l.wg.Done()
	defer func() {
		l.mu.Lock()
		delete(l.conns, conn)
		l.mu.Unlock()
		_ = conn.Close()
	}()
	s := &Sub{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	_ = conn.SetDeadline(time.Now().Add(l.timeout))
	err := handshake(conn, s.r, "SUB", "PUB", "XPUB")
	if err == nil {
		_, err = conn.Write(l.sub)
	}
	if err != nil {
		l.log.Info("KV-event publisher dropped: handshake failed", "peer", conn.RemoteAddr().String(), "err", fmt.Errorf("within %v: %w", l.timeout, err))
		return
	}
	_ = conn.SetDeadline(time.Time{})
	l.handle(s)
}

// Close stops listening, closes every connection, and returns once the
// handlers have returned. Closing again does nothing.
func (l *SubListener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	err := l.ln.Close()
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
	return err
}

// RemoteAddr returns the address of the connection's peer.
func (s *Sub) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }
