package kvevents

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Sub is a ZeroMQ SUB socket connected to one PUB endpoint over TCP. The
// package also reads a replay's DEALER connection and a Replayer's
// clients with it: Recv reads any ZMTP 3.0 peer's messages.
type Sub struct {
	conn net.Conn
	r    *bufio.Reader
	wmu  sync.Mutex // PONGs are written from Recv, Close from anywhere
	bufs [][]byte   // frame buffers, one per part, reused
}

// DialSub connects to the PUB socket at addr ("host:port"), subscribes to
// the messages whose first frame begins with topic (all when empty), and
// returns once the handshake is done. ctx bounds the dial and handshake.
func DialSub(ctx context.Context, addr string, topic []byte) (*Sub, error) {
	// ZMTP 3.0 subscribes with a message: 1, then the topic prefix.
	return dialZMTP(ctx, addr, appendFrame(nil, 0, append([]byte{1}, topic...)), "SUB", "PUB", "XPUB")
}

// dialZMTP connects to addr as a socket of type mine, does the handshake with a
// peer of one of the types want, and writes first (when not empty). ctx
// bounds all of it.
func dialZMTP(ctx context.Context, addr string, first []byte, mine string, want ...string) (*Sub, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("zmtp dial %s: %w", addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	s := &Sub{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	err = handshake(conn, s.r, mine, want...)
	if err == nil && len(first) > 0 {
		_, err = conn.Write(first)
	}
	if !stop() || err != nil {
		_ = conn.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("zmtp %s handshake with %s: %w", mine, addr, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return s, nil
}

// Recv returns the next whole message, its frames appended to parts[:0].
// The frames stay valid until the next Recv. A PING is answered on the way.
// A message's frames together may not pass MaxFrame bytes.
func (s *Sub) Recv(parts [][]byte) ([][]byte, error) {
	parts = parts[:0]
	for i, b := range s.bufs { // an outsized message's buffers are not kept for the next
		if cap(b) > maxKeptFrame {
			s.bufs[i] = nil
		}
	}
	size := 0
	for {
		if len(parts) == maxParts {
			return parts[:0], fmt.Errorf("zmtp: a message of more than %d frames", maxParts)
		}
		if len(s.bufs) <= len(parts) {
			s.bufs = append(s.bufs, nil)
		}
		f, buf, err := readFrame(s.r, s.bufs[len(parts)], MaxFrame)
		s.bufs[len(parts)] = buf
		if err != nil {
			if len(parts) > 0 {
				err = unexpected(err)
			}
			return parts[:0], err
		}
		if f.flags&flagCommand != 0 {
			if len(parts) > 0 {
				return parts[:0], errors.New("zmtp: a command inside a message")
			}
			if err := s.command(f.body); err != nil {
				return parts[:0], err
			}
			continue
		}
		if size += len(f.body); size > MaxFrame {
			return parts[:0], fmt.Errorf("zmtp: a message of more than %d bytes", MaxFrame)
		}
		parts = append(parts, f.body)
		if f.flags&flagMore == 0 {
			return parts, nil
		}
	}
}

// maxKeptFrame is the largest frame buffer a Sub keeps for the next message.
const maxKeptFrame = 1 << 20

// command handles a command received after the handshake: a PING is
// answered with a PONG carrying its context; anything else is ignored.
func (s *Sub) command(body []byte) error {
	name, data, err := parseCommand(body)
	if err != nil {
		return err
	}
	if name != "PING" {
		return nil
	}
	if len(data) < 2 {
		return errors.New("zmtp: malformed PING")
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err = s.conn.Write(appendFrame(nil, flagCommand, command("PONG", data[2:])))
	return err
}

// Close closes the connection; a Recv in progress returns an error.
func (s *Sub) Close() error {
	return s.conn.Close()
}
