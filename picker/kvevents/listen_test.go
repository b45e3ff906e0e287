package kvevents

import (
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
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

// logLines is a logger's output, line by line.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logLines) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func TestListenSubDropsBadPeersAlone(t *testing.T) {
	var logged logLines
	l, got := listenSub(t, "127.0.0.1:0", "kv@",
		WithHandshakeTimeout(200*time.Millisecond), WithLog(funcr.New(logged.add, funcr.Options{})))
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

	// A good publisher is served while the stalled one waits.
	p := dialPub(t, addr)
	waitSubscribers(t, p, 1)
	p.Send([]byte("kv@a@m"), seq(0), []byte("through"))
	if diff := cmp.Diff([]string{"kv@a@m", string(seq(0)), "through"}, next(t, got.msgs)); diff != "" {
		t.Errorf("beside the bad peers (-want +got):\n%s", diff)
	}

	// Both bad peers are closed: each reads the listener's greeting and
	// READY, then the end of the connection.
	for name, c := range map[string]net.Conn{"stalled": stalled, "wrong": wrong} {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			t.Errorf("%s peer: %v, want the connection closed", name, err)
		}
		if want := append(greeting(), ready("SUB")...); !bytes.Equal(b, want) {
			t.Errorf("%s peer read %q, want the greeting and READY alone", name, b)
		}
	}
	for _, reason := range []string{"i/o timeout", "a SUB socket cannot talk to a SUB socket"} {
		if !strings.Contains(logged.all(), reason) {
			t.Errorf("log lacks %q:\n%s", reason, logged.all())
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
