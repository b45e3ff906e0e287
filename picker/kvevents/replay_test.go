package kvevents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func listenReplay(t *testing.T, keep int) *Replayer {
	t.Helper()
	r, err := ListenReplay("127.0.0.1:0", keep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// replayAll returns "seq:payload" for every batch a replay from seq from
// brings.
func replayAll(t *testing.T, addr string, from uint64) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []string
	err := Replay(ctx, addr, from, func(seq uint64, payload []byte) error {
		got = append(got, fmt.Sprintf("%d:%s", seq, payload))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestReplayKeepsTheLastBatches: a replayer keeping five batches of ten
// recorded replays the last five, from the sequence number asked for on.
func TestReplayKeepsTheLastBatches(t *testing.T) {
	r := listenReplay(t, 5)
	addr := r.Addr().String()
	if got := replayAll(t, addr, 0); len(got) != 0 {
		t.Errorf("before any batch, a replay brought %q", got)
	}
	for i := range 10 {
		r.Record(uint64(i), []byte{'a' + byte(i)})
	}
	cases := map[uint64][]string{
		0:  {"5:f", "6:g", "7:h", "8:i", "9:j"},
		7:  {"7:h", "8:i", "9:j"},
		10: nil,
	}
	for from, want := range cases {
		if diff := cmp.Diff(want, replayAll(t, addr, from)); diff != "" {
			t.Errorf("replay from %d (-want +got):\n%s", from, diff)
		}
	}
}

// TestReplayPayloadIsACopy: a batch recorded is kept as it was, whatever
// the publisher does with its buffer afterwards.
func TestReplayPayloadIsACopy(t *testing.T) {
	r := listenReplay(t, 2)
	buf := []byte("first")
	r.Record(0, buf)
	copy(buf, "XXXXX")
	if diff := cmp.Diff([]string{"0:first"}, replayAll(t, r.Addr().String(), 0)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// rawRouter accepts one connection, answers the handshake as a ROUTER and
// writes reply after the client's request has arrived; then it hangs up
// when hangUp is set, else reads until the client does.
func rawRouter(t *testing.T, reply []byte, hangUp bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if handshake(c, br, "ROUTER", "DEALER") != nil {
			return
		}
		s := &Sub{conn: c, r: br}
		if _, err := s.Recv(nil); err != nil {
			return
		}
		_, _ = c.Write(reply)
		if !hangUp {
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	return ln.Addr().String()
}

func message(parts ...[]byte) []byte {
	var b []byte
	for i, p := range parts {
		flags := byte(flagMore)
		if i == len(parts)-1 {
			flags = 0
		}
		b = appendFrame(b, flags, p)
	}
	return b
}

// TestReplayReadsTheTopicForm: TensorRT-LLM's publisher puts the topic
// before each reply's sequence number, and an empty one before the end's.
func TestReplayReadsTheTopicForm(t *testing.T) {
	reply := append(message(nil, []byte("kv"), seq(4), []byte("p4")), message(nil, []byte("kv"), seq(5), []byte("p5"))...)
	reply = append(reply, message(nil, nil, seq(endSeq), nil)...)
	if diff := cmp.Diff([]string{"4:p4", "5:p5"}, replayAll(t, rawRouter(t, reply, false), 4)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestReplayFailures: a reply of another shape, a peer that hangs up
// before the end, and one that never answers (within the context) each end
// the replay with an error, and an error from the callback is returned as
// it is.
func TestReplayFailures(t *testing.T) {
	t.Run("shape", func(t *testing.T) {
		err := Replay(t.Context(), rawRouter(t, message(nil, []byte("short"), []byte("x")), false), 0, func(uint64, []byte) error { return nil })
		if !errors.Is(err, errReply) {
			t.Errorf("got %v, want %v", err, errReply)
		}
	})
	t.Run("hang-up", func(t *testing.T) {
		n := 0
		err := Replay(t.Context(), rawRouter(t, message(nil, seq(0), []byte("p0")), true), 0, func(uint64, []byte) error { n++; return nil })
		if err == nil || n != 1 {
			t.Errorf("got %v after %d batches, want an error after 1", err, n)
		}
	})
	t.Run("silent", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		err := Replay(ctx, rawRouter(t, nil, false), 0, func(uint64, []byte) error { return nil })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want the context's deadline", err)
		}
	})
	t.Run("callback", func(t *testing.T) {
		r := listenReplay(t, 4)
		r.Record(1, []byte("x"))
		r.Record(2, []byte("y"))
		stop := errors.New("stop")
		n := 0
		err := Replay(t.Context(), r.Addr().String(), 0, func(uint64, []byte) error { n++; return stop })
		if !errors.Is(err, stop) || n != 1 {
			t.Errorf("got %v after %d batches, want %v after 1", err, n, stop)
		}
	})
}

// TestReplayerServesARequestWithoutDelimiter: a bare DEALER may send the
// sequence number alone; it is answered without delimiters.
func TestReplayerServesARequestWithoutDelimiter(t *testing.T) {
	r := listenReplay(t, 4)
	r.Record(3, []byte("p3"))
	c, err := net.Dial("tcp", r.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if err := handshake(c, br, "DEALER", "ROUTER"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(message(seq(0))); err != nil {
		t.Fatal(err)
	}
	s := &Sub{conn: c, r: br}
	var got []string
	for range 2 {
		parts, err := s.Recv(nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%x|%s", parts[0], parts[1]))
	}
	want := []string{"0000000000000003|p3", "ffffffffffffffff|"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// FuzzReplyParts: any message a replay peer may send is either read as a
// sequence number and a payload taken from its frames, or refused with
// errReply; nothing panics.
func FuzzReplyParts(f *testing.F) {
	f.Add([]byte{0, 8, 0, 0, 0, 0, 0, 0, 0, 1, 2, 'p', 'q'})
	f.Add([]byte{0, 2, 'k', 'v', 8, 0, 0, 0, 0, 0, 0, 0, 9, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		// data is frames, each a length byte and that many bytes.
		var parts [][]byte
		for len(data) > 0 {
			n := min(int(data[0]), len(data)-1)
			parts = append(parts, data[1:1+n])
			data = data[1+n:]
		}
		seq, payload, err := replyParts(parts)
		if err != nil {
			if !errors.Is(err, errReply) {
				t.Fatalf("error %v", err)
			}
			return
		}
		found := false
		for i, p := range parts {
			if len(p) == 8 && binary.BigEndian.Uint64(p) == seq && i+1 < len(parts) && bytes.Equal(parts[i+1], payload) {
				found = true
			}
		}
		if !found {
			t.Fatalf("seq %d and payload %q are not two frames in a row of %q", seq, payload, parts)
		}
	})
}
