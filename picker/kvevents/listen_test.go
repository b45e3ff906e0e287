package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/inferpick/inferpick/test/framework"
)

// received is what a SubListener's handler read: each message's frames
// as strings, then the error that ended the connection.
type received struct {
	msgs chan []string
	ends chan error
}

func listenSub(t *testing.T, addr, topic string, opts ...ListenOption) (*SubListener, received) {
	t.Helper()
	got := received{msgs: make(chan []string, 100), ends: make(chan error, 10)}
	l, err := ListenSub(addr, []byte(topic), func(s *Sub) {
		var parts [][]byte
		for {
			var err error
			if parts, err = s.Recv(parts); err != nil {
				got.ends <- err
				return
			}
			msg := make([]string, len(parts))
			for i, p := range parts {
				msg[i] = string(p)
			}
			got.msgs <- msg
		}
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, got
}

func dialPub(t *testing.T, addr string) *Pub {
	t.Helper()
	p := DialPub(t.Context(), addr)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func next(t *testing.T, ch <-chan []string) []string {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message within 10s")
		return nil
	}
}

func TestListenSubTakesConnectingPublishers(t *testing.T) {
	l, got := listenSub(t, "127.0.0.1:0", "kv@")
	a := dialPub(t, l.Addr().String())
	b := dialPub(t, l.Addr().String())
	waitSubscribers(t, a, 1)
	waitSubscribers(t, b, 1)

	big := strings.Repeat("x", 300)
	a.Send([]byte("other@a@m"), seq(0), []byte("not subscribed"))
	a.Send([]byte("kv@a@m"), seq(1), []byte(big))
	if diff := cmp.Diff([]string{"kv@a@m", string(seq(1)), big}, next(t, got.msgs)); diff != "" {
		t.Errorf("from the first publisher (-want +got):\n%s", diff)
	}
	b.Send([]byte("kv@b@m"), seq(0), []byte("two"))
	if diff := cmp.Diff([]string{"kv@b@m", string(seq(0)), "two"}, next(t, got.msgs)); diff != "" {
		t.Errorf("from the second publisher (-want +got):\n%s", diff)
	}
}

func TestDialPubReconnects(t *testing.T) {
	l, _ := listenSub(t, "127.0.0.1:0", "")
	addr := l.Addr().String()
	p := dialPub(t, addr)
	waitSubscribers(t, p, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	waitSubscribers(t, p, 0)

	_, got := listenSub(t, addr, "")
	waitSubscribers(t, p, 1)
	p.Send([]byte("kv@a@m"), seq(7), []byte("again"))
	if diff := cmp.Diff([]string{"kv@a@m", string(seq(7)), "again"}, next(t, got.msgs)); diff != "" {
		t.Errorf("after the listener came back (-want +got):\n%s", diff)
	}
}

func TestListenSubDropsBadPeersAlone(t *testing.T) {
	var logged framework.LogLines
	l, got := listenSub(t, "127.0.0.1:0", "kv@",
		WithHandshakeTimeout(200*time.Millisecond), WithLog(logged.Logger()))
	addr := l.Addr().String()

	stalled, err := net.Dial("tcp", addr) // says nothing
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	wrong, err := net.Dial("tcp", addr) // a SUB talking to a SUB
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if _, err := wrong.Write(append(greeting(), ready("SUB")...)); err != nil {
		t.Fatal(err)
	}
	huge, err := net.Dial("tcp", addr) // announces a 100 KiB READY
	if err != nil {
		t.Fatal(err)
	}
	defer huge.Close()
	if _, err := huge.Write(binary.BigEndian.AppendUint64(append(greeting(), flagCommand|flagLong), 100<<10)); err != nil {
		t.Fatal(err)
	}

	// A good publisher is served while the stalled one waits.
	p := dialPub(t, addr)
	waitSubscribers(t, p, 1)
	p.Send([]byte("kv@a@m"), seq(0), []byte("through"))
	if diff := cmp.Diff([]string{"kv@a@m", string(seq(0)), "through"}, next(t, got.msgs)); diff != "" {
		t.Errorf("beside the bad peers (-want +got):\n%s", diff)
	}

	// The bad peers are closed: each reads the listener's greeting and
	// READY, then the end of the connection.
	for name, c := range map[string]net.Conn{"stalled": stalled, "wrong": wrong, "huge": huge} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			t.Errorf("%s peer: %v, want the connection closed", name, err)
		}
		if want := append(greeting(), ready("SUB")...); !bytes.Equal(b, want) {
			t.Errorf("%s peer read %q, want the greeting and READY alone", name, b)
		}
	}
	for _, reason := range []string{"i/o timeout", "a SUB socket cannot talk to a SUB socket", "a frame of 102400 bytes is over the 8192 allowed"} {
		if !strings.Contains(logged.String(), reason) {
			t.Errorf("log lacks %q:\n%s", reason, logged.String())
		}
	}
}

func TestListenSubCloseEndsConnections(t *testing.T) {
	l, got := listenSub(t, "127.0.0.1:0", "")
	addr := l.Addr().String()
	p := dialPub(t, addr)
	waitSubscribers(t, p, 1)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got.ends:
		if err == nil {
			t.Error("the handler's Recv ended without an error")
		}
	default:
		t.Error("Close returned before the handler's Recv failed")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		_ = c.Close()
		t.Error("a connection was accepted after Close")
	}
}

// dialFrom opens a TCP connection to addr from the local IP src.
func dialFrom(t *testing.T, addr, src string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// served reports whether the listener serves c: it reads the listener's
// greeting and READY, rather than the end of the connection.
func served(t *testing.T, c net.Conn) bool {
	t.Helper()
	want := append(greeting(), ready("SUB")...)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	n, err := io.ReadFull(c, got)
	switch {
	case err == nil && bytes.Equal(got, want):
		return true
	case n == 0 && errors.Is(err, io.EOF):
		return false
	}
	t.Fatalf("read %q, %v: want the greeting and READY, or the end of the connection", got[:n], err)
	return false
}

// A SubListener serves 128 connections at once from one IP, past which it
// closes those that come from it while still serving other IPs', and logs
// the refusals once; a connection that ends makes room for another.
func TestListenSubBoundsConnectionsPerIP(t *testing.T) {
	var logged framework.LogLines
	l, _ := listenSub(t, "127.0.0.1:0", "kv@",
		WithHandshakeTimeout(time.Minute), WithLog(logged.Logger()))
	addr := l.Addr().String()
	var held []net.Conn
	for i := range 128 {
		c := dialFrom(t, addr, "127.0.0.1")
		if !served(t, c) {
			t.Fatalf("connection %d from 127.0.0.1 refused", i+1)
		}
		held = append(held, c)
	}
	for i := range 2 {
		if served(t, dialFrom(t, addr, "127.0.0.1")) {
			t.Fatalf("connection %d from 127.0.0.1 served past 128", 129+i)
		}
	}
	if !served(t, dialFrom(t, addr, "127.0.0.2")) {
		t.Error("a connection from another IP refused")
	}
	if n := strings.Count(logged.String(), "too many open"); n != 1 {
		t.Errorf("two refusals logged %d times, want once:\n%s", n, logged.String())
	}

	_ = held[0].Close()
	framework.Eventually(t, framework.Timeout, "a connection from 127.0.0.1 served after one of the 128 ended", func() error {
		if !served(t, dialFrom(t, addr, "127.0.0.1")) {
			return errors.New("refused")
		}
		return nil
	})
}

// Peers that connect and say nothing hold little of the listener's memory:
// not each the buffer a subscribed publisher's messages are read through.
func TestListenSubReservesLittleForSilentPeers(t *testing.T) {
	const n = 200
	l, _ := listenSub(t, "127.0.0.1:0", "", WithHandshakeTimeout(time.Minute), WithMaxConns(n, n))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		if !served(t, dialFrom(t, l.Addr().String(), "127.0.0.1")) {
			t.Fatalf("connection %d refused", i+1)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > n*16<<10 {
		t.Errorf("%d silent peers hold %d KiB of heap, want under 16 KiB each", n, grown>>10)
	}
}

// A peer that sends its handshake and a message in one go has the message
// read.
func TestListenSubReadsWhatFollowsTheHandshake(t *testing.T) {
	l, got := listenSub(t, "127.0.0.1:0", "")
	c := dialFrom(t, l.Addr().String(), "127.0.0.1")
	all := append(greeting(), ready("PUB")...)
	all = appendFrame(all, flagMore, []byte("kv@a@m"))
	all = appendFrame(all, flagMore, seq(3))
	all = appendFrame(all, 0, []byte("at once"))
	if _, err := c.Write(all); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"kv@a@m", string(seq(3)), "at once"}, next(t, got.msgs)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// WithMaxConns bounds the connections from all IPs together.
func TestListenSubBoundsConnections(t *testing.T) {
	l, _ := listenSub(t, "127.0.0.1:0", "kv@", WithHandshakeTimeout(time.Minute), WithMaxConns(3, 2))
	addr := l.Addr().String()
	for i, src := range []string{"127.0.0.1", "127.0.0.1", "127.0.0.2"} {
		if !served(t, dialFrom(t, addr, src)) {
			t.Fatalf("connection %d (from %s) refused", i+1, src)
		}
	}
	if served(t, dialFrom(t, addr, "127.0.0.1")) {
		t.Error("a third connection from 127.0.0.1 served past 2 from one IP")
	}
	if served(t, dialFrom(t, addr, "127.0.0.3")) {
		t.Error("a fourth connection served past 3")
	}
}

// failing is a listener whose Accept fails, as when out of file
// descriptors, fails times times and then takes its connections.
type failing struct {
	net.Listener
	mu     sync.Mutex
	times  int
	failed chan int // takes a value at each failure, when there is room
	closed bool
}

func (f *failing) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return f.Listener.Close()
}

func (f *failing) Accept() (net.Conn, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, net.ErrClosed
	}
	if f.times > 0 {
		f.times--
		f.mu.Unlock()
		select {
		case f.failed <- 1:
		default:
		}
		return nil, errors.New("accept4: too many open files")
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}

func failingListener(t *testing.T, times int) *failing {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return &failing{Listener: ln, times: times, failed: make(chan int, 100)}
}

// A failing Accept is tried again by each listening socket: a PUB, a SUB
// listener and a replay endpoint all take connections once it works.
func TestListenersTakeConnectionsAfterAcceptFails(t *testing.T) {
	t.Run("PUB", func(t *testing.T) {
		p := servePub(failingListener(t, 3))
		t.Cleanup(func() { _ = p.Close() })
		s := dial(t, p.Addr().String(), "")
		waitSubscribers(t, p, 1)
		p.Send([]byte("kv@a@m"), seq(1), []byte("after"))
		if diff := cmp.Diff([]string{"kv@a@m", string(seq(1)), "after"}, recv(t, s)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("SUB", func(t *testing.T) {
		got := received{msgs: make(chan []string, 1), ends: make(chan error, 1)}
		l := serveSub(failingListener(t, 3), nil, func(s *Sub) {
			parts, err := s.Recv(nil)
			if err == nil {
				got.msgs <- []string{string(parts[0])}
			}
		})
		t.Cleanup(func() { _ = l.Close() })
		p := dialPub(t, l.Addr().String())
		waitSubscribers(t, p, 1)
		p.Send([]byte("kv@a@m"), seq(1), []byte("after"))
		if diff := cmp.Diff([]string{"kv@a@m"}, next(t, got.msgs)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("replay", func(t *testing.T) {
		r := serveReplay(failingListener(t, 3), 4)
		t.Cleanup(func() { _ = r.Close() })
		r.Record(5, []byte("kept"))
		var got []string
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		err := Replay(ctx, r.Addr().String(), 0, func(_ uint64, payload []byte) error {
			got = append(got, string(payload))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"kept"}, got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

// Close returns without waiting out the wait after a failed Accept: on a
// clock that never moves, that wait would never end.
func TestListenSubCloseCutsTheAcceptRetryShort(t *testing.T) {
	f := failingListener(t, 1<<30)
	frozen := testingclock.NewFakeClock(time.Now())
	l := serveSub(f, nil, func(*Sub) {}, func(l *SubListener) { l.srv.clock = frozen })
	<-f.failed
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = l.Close()
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the retry after a failed Accept")
	}
}
