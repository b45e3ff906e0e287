package kvevents

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func listen(t *testing.T) *Pub {
	t.Helper()
	p, err := ListenPub("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dial(t *testing.T, addr, topic string) *Sub {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := DialSub(ctx, addr, []byte(topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitSubscribers waits until the publisher has n subscribers.
func waitSubscribers(t *testing.T, p *Pub, n int) {
	t.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for p.Subscribers() != n {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%d subscribers, want %d", p.Subscribers(), n)
		}
	}
}

func seq(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func recv(t *testing.T, s *Sub) []string {
	t.Helper()
	parts, err := s.Recv(nil)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out
}

func TestPubSub(t *testing.T) {
	p := listen(t)
	all := dial(t, p.Addr().String(), "")
	a := dial(t, p.Addr().String(), "kv@a")
	waitSubscribers(t, p, 2)

	big := strings.Repeat("x", 300) // a long frame
	p.Send([]byte("kv@b"), seq(0), []byte("one"))
	p.Send([]byte("kv@a@m"), seq(1), []byte(big))
	if diff := cmp.Diff([]string{"kv@b", string(seq(0)), "one"}, recv(t, all)); diff != "" {
		t.Errorf("first message to the subscriber of all (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"kv@a@m", string(seq(1)), big}, recv(t, all)); diff != "" {
		t.Errorf("second message to the subscriber of all (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"kv@a@m", string(seq(1)), big}, recv(t, a)); diff != "" {
		t.Errorf("the subscriber of kv@a (-want +got):\n%s", diff)
	}

	// A subscriber that joins later gets only what is sent after it.
	late := dial(t, p.Addr().String(), "")
	waitSubscribers(t, p, 3)
	p.Send([]byte("kv@a"), seq(2), []byte("three"))
	if diff := cmp.Diff([]string{"kv@a", string(seq(2)), "three"}, recv(t, late)); diff != "" {
		t.Errorf("late subscriber (-want +got):\n%s", diff)
	}

	// Closing a subscriber ends its Recv and the publisher drops it.
	done := make(chan error, 1)
	go func() {
		_, err := late.Recv(nil)
		done <- err
	}()
	_ = late.Close()
	if err := <-done; err == nil {
		t.Error("Recv on a closed subscriber returned no error")
	}
	waitSubscribers(t, p, 2)
}

func TestCloseEndsSubscribers(t *testing.T) {
	p, err := ListenPub("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := dial(t, p.Addr().String(), "")
	waitSubscribers(t, p, 1)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(nil); err == nil {
		t.Error("Recv after the publisher closed returned no error")
	}
}

// rawPub accepts one connection and plays a PUB peer by hand: it sends
// the given bytes after its greeting, then records what it reads.
func rawPub(t *testing.T, greet, then []byte) (addr string, read <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	out := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(append(append([]byte{}, greet...), then...))
		b, _ := io.ReadAll(io.LimitReader(c, 1<<16))
		out <- b
	}()
	return ln.Addr().String(), out
}

func TestPingIsAnswered(t *testing.T) {
	ping := appendFrame(nil, flagCommand, command("PING", []byte{0, 10, 'c', 't', 'x'}))
	msg := appendFrame(nil, 0, []byte("hello"))
	addr, read := rawPub(t, greeting(), append(append(ready("PUB"), ping...), msg...))
	s := dial(t, addr, "")
	if diff := cmp.Diff([]string{"hello"}, recv(t, s)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	_ = s.Close()
	got := <-read
	want := append(append(append(greeting(), ready("SUB")...), appendFrame(nil, 0, []byte{1})...),
		appendFrame(nil, flagCommand, command("PONG", []byte("ctx")))...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("what the subscriber sent (-want +got):\n%s", diff)
	}
}

func TestHandshakeAndFrameErrors(t *testing.T) {
	curve := greeting()
	copy(curve[12:32], "CURVE")
	old := greeting()
	old[10] = 2
	huge := []byte{flagLong, 0, 0, 0, 0, 0x10, 0, 0, 1}
	cases := map[string]struct {
		greet, then []byte
		dialErr     bool
	}{
		"not ZMTP":               {greet: []byte("HTTP/1.1 400 Bad Request\r\n\r\n" + strings.Repeat(" ", 64)), dialErr: true},
		"another mechanism":      {greet: curve, dialErr: true},
		"ZMTP 2":                 {greet: old, dialErr: true},
		"a SUB peer":             {greet: greeting(), then: ready("SUB"), dialErr: true},
		"a message before READY": {greet: greeting(), then: appendFrame(nil, 0, []byte("x")), dialErr: true},
		"a frame over MaxFrame":  {greet: greeting(), then: append(ready("PUB"), huge...)},
		"bad flags":              {greet: greeting(), then: append(ready("PUB"), 0x80, 0)},
		"a command mid-message":  {greet: greeting(), then: append(append(ready("PUB"), appendFrame(nil, flagMore, []byte("a"))...), appendFrame(nil, flagCommand, command("PING", []byte{0, 0}))...)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			addr, _ := rawPub(t, tc.greet, tc.then)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			s, err := DialSub(ctx, addr, nil)
			if tc.dialErr {
				if err == nil {
					_ = s.Close()
					t.Fatal("DialSub succeeded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if parts, err := s.Recv(nil); err == nil {
				t.Errorf("Recv returned %q and no error", parts)
			}
		})
	}
}

// FuzzSubRecv feeds a subscriber a PUB peer's greeting and READY, then
// arbitrary bytes: Recv never panics, and returns whole messages of at
// most maxParts frames until it fails.
func FuzzSubRecv(f *testing.F) {
	f.Add(appendFrame(appendFrame(nil, flagMore, []byte("topic")), 0, []byte("payload")))
	f.Add(appendFrame(nil, flagCommand, command("PING", []byte{0, 1, 2})))
	f.Add([]byte{flagLong, 0, 0, 0, 0, 0, 0, 0, 3, 'a', 'b', 'c'})
	f.Fuzz(func(t *testing.T, data []byte) {
		client, server := net.Pipe()
		defer client.Close()
		go func() {
			defer server.Close()
			go func() { _, _ = io.Copy(io.Discard, server) }()
			_, _ = server.Write(append(greeting(), ready("PUB")...))
			_, _ = server.Write(data)
		}()
		s := &Sub{conn: client, r: bufio.NewReader(client)}
		if err := handshake(client, s.r, "SUB", "PUB"); err != nil {
			t.Fatal(err)
		}
		for {
			parts, err := s.Recv(nil)
			if err != nil {
				return
			}
			if len(parts) == 0 || len(parts) > maxParts {
				t.Fatalf("a message of %d parts", len(parts))
			}
		}
	})
}

// TestPubDropsAPeerOverTheSubscriptionBound subscribes a raw SUB peer n
// times, then pings: at the bound the PONG comes back (every subscription
// was taken and the peer kept); one more and the publisher hangs up.
func TestPubDropsAPeerOverTheSubscriptionBound(t *testing.T) {
	p := listen(t)
	for _, tc := range []struct {
		n    int
		kept bool
	}{{maxSubscriptions, true}, {maxSubscriptions + 1, false}} {
		conn, err := net.Dial("tcp", p.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(conn)
		if err := handshake(conn, r, "SUB", "PUB"); err != nil {
			t.Fatal(err)
		}
		var out []byte
		for range tc.n {
			out = appendFrame(out, 0, []byte("\x01topic"))
		}
		out = appendFrame(out, flagCommand, command("PING", []byte{0, 0, 'x'}))
		if _, err := conn.Write(out); err != nil && tc.kept {
			t.Fatal(err)
		}
		pong := false
		for !pong {
			f, _, err := readFrame(r, nil, MaxFrame)
			if err != nil {
				break
			}
			name, _, _ := parseCommand(f.body)
			pong = f.flags&flagCommand != 0 && name == "PONG"
		}
		if pong != tc.kept {
			t.Errorf("%d subscriptions: answered %v, want %v", tc.n, pong, tc.kept)
		}
		_ = conn.Close()
	}
	waitSubscribers(t, p, 0)
}

// A message may hold MaxFrame bytes in all, whatever its frames; the
// buffers of an outsized one are not kept for the messages after it.
func TestSubBoundsWhatAMessageHolds(t *testing.T) {
	p := listen(t)
	s := dial(t, p.Addr().String(), "")
	waitSubscribers(t, p, 1)

	p.Send([]byte("kv"), seq(1), make([]byte, 2<<20))
	if parts := recv(t, s); len(parts) != 3 || len(parts[2]) != 2<<20 {
		t.Fatalf("a 2 MiB batch: %d parts", len(parts))
	}
	p.Send([]byte("kv"), seq(2), []byte{0x90})
	if parts := recv(t, s); len(parts) != 3 || parts[2] != "\x90" {
		t.Fatalf("the batch after: %q", parts)
	}
	for i, b := range s.bufs {
		if cap(b) > maxKeptFrame {
			t.Errorf("frame buffer %d keeps %d bytes after the outsized message", i, cap(b))
		}
	}

	p.Send([]byte("kv"), seq(3), make([]byte, MaxFrame-len("kv")-7)) // one byte over, counting the frames together
	if _, err := s.Recv(nil); err == nil || !strings.Contains(err.Error(), "a message of more than") {
		t.Fatalf("a message over MaxFrame in all: %v", err)
	}
}
