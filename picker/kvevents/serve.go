package kvevents

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// acceptLoop gives take each connection ln accepts, until ln is closed or
// take returns false. A failing Accept (out of file descriptors, say) is
// tried again after a wait on clk, 5 ms doubling up to 1 s, that done cuts
// short.
func acceptLoop(ln net.Listener, done <-chan struct{}, clk clock.Clock, log logr.Logger, take func(net.Conn) bool) {
	var wait time.Duration
	for {
		conn, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			log.Error(err, "Accepting a connection failed", "address", ln.Addr().String(), "retryIn", wait)
			t := clk.NewTimer(wait)
			select {
			case <-done:
				t.Stop()
				return
			case <-t.C():
			}
			continue
		}
		wait = 0
		if !take(conn) {
			return
		}
	}
}

// server serves each connection its listener accepts on a goroutine of its
// own, until closed; it admits at most maxConns at once (0: any number),
// and at most maxPerIP from one remote IP (0: any number).
type server struct {
	ln       net.Listener
	serve    func(net.Conn)
	log      logr.Logger
	clock    clock.Clock // times the accept retry and refusal logging
	maxConns int
	maxPerIP int
	done     chan struct{} // closed by close
	wg       sync.WaitGroup

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	perIP   map[netip.Addr]int
	closed  bool
	refused int       // connections refused since refusal was last logged
	loggedR time.Time // when refusal was last logged
}

// refusalLogEvery is how often refused connections are logged at most: the
// first at once, then a count of those since.
const refusalLogEvery = 10 * time.Second

// newServer returns a server of ln's connections; start starts it.
func newServer(ln net.Listener, serve func(net.Conn), log logr.Logger) *server {
	return &server{ln: ln, serve: serve, log: log, clock: clock.RealClock{}, done: make(chan struct{}),
		conns: map[net.Conn]struct{}{}, perIP: map[netip.Addr]int{}}
}

func (s *server) start() {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		acceptLoop(s.ln, s.done, s.clock, s.log, s.take)
	}()
}

// remoteIP is the IP of conn's peer; the zero Addr when not TCP.
func remoteIP(conn net.Conn) netip.Addr {
	if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// take serves conn, or closes it when the server is closed (then reports
// false) or conn is past a bound.
func (s *server) take(conn net.Conn) bool {
	ip := remoteIP(conn)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = conn.Close()
		return false
	}
	if (s.maxConns > 0 && len(s.conns) >= s.maxConns) || (s.maxPerIP > 0 && s.perIP[ip] >= s.maxPerIP) {
		s.refuseLocked(conn, ip)
		s.mu.Unlock()
		_ = conn.Close()
		return true
	}
	s.conns[conn] = struct{}{}
	s.perIP[ip]++
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.conns, conn)
			s.perIP[ip]--
			if s.perIP[ip] == 0 {
				delete(s.perIP, ip)
			}
			s.mu.Unlock()
			_ = conn.Close()
		}()
		s.serve(conn)
	}()
	return true
}

// refuseLocked counts a refused connection, and logs it when refusal was
// not logged within refusalLogEvery.
func (s *server) refuseLocked(conn net.Conn, ip netip.Addr) {
	s.refused++
	now := s.clock.Now()
	if !s.loggedR.IsZero() && now.Sub(s.loggedR) < refusalLogEvery {
		return
	}
	s.log.Info("Connections refused: too many open", "peer", conn.RemoteAddr().String(),
		"refused", s.refused, "open", len(s.conns), "openFromPeerIP", s.perIP[ip],
		"limit", s.maxConns, "limitPerIP", s.maxPerIP)
	s.refused, s.loggedR = 0, now
}

// close stops listening, closes every connection, and returns once each
// has been served; already is true when it was closed before.
func (s *server) close() (already bool, err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return true, nil
	}
	s.closed = true
	close(s.done)
	err = s.ln.Close()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return false, err
}
