package kvevents

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// ZMTP 3.0 (rfc.zeromq.org/spec/23) with the NULL mechanism: a 64-byte
// greeting each way, a READY command each way naming the socket type, then
// frames. A frame is a flags byte (MORE, LONG, COMMAND), a 1- or 8-byte
// length, and the body.
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04

	greetingLen = 64
)

// MaxFrame bounds a frame the package reads; a longer one is an error.
var MaxFrame = 16 << 20

// maxReady bounds the peer's READY command, its socket type and metadata
// (a few dozen bytes from vLLM), so that a peer in its handshake makes a
// listener hold no more.
const maxReady = 8 << 10

// readChunk is how much a frame's buffer grows by at a time.
const readChunk = 64 << 10

// maxParts bounds the frames of one message.
const maxParts = 64

// greeting is what this side sends: version 3.0, NULL, not as-server.
func greeting() []byte {
	g := make([]byte, greetingLen)
	g[0], g[9] = 0xff, 0x7f
	g[10], g[11] = 3, 0
	copy(g[12:32], "NULL")
	return g
}

// readGreeting reads and checks the peer's greeting.
func readGreeting(r io.Reader) error {
	var g [greetingLen]byte
	if _, err := io.ReadFull(r, g[:]); err != nil {
		return fmt.Errorf("zmtp greeting: %w", err)
	}
	if g[0] != 0xff || g[9] != 0x7f {
		return errors.New("zmtp greeting: not a ZMTP 3 peer")
	}
	if g[10] < 3 {
		return fmt.Errorf("zmtp greeting: peer speaks ZMTP %d.%d, not 3", g[10], g[11])
	}
	mech := g[12:32]
	if string(trimZeros(mech)) != "NULL" {
		return fmt.Errorf("zmtp greeting: security mechanism %q, only NULL is spoken", trimZeros(mech))
	}
	return nil
}

func trimZeros(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// appendFrame appends one frame.
func appendFrame(dst []byte, flags byte, body []byte) []byte {
	if len(body) > 255 {
		dst = append(dst, flags|flagLong)
		dst = binary.BigEndian.AppendUint64(dst, uint64(len(body)))
	} else {
		dst = append(dst, flags, byte(len(body)))
	}
	return append(dst, body...)
}

// command returns the body of a command frame: its name, then data.
func command(name string, data []byte) []byte {
	b := append([]byte{byte(len(name))}, name...)
	return append(b, data...)
}

// ready is the READY command naming the socket type.
func ready(socketType string) []byte {
	props := append([]byte{byte(len("Socket-Type"))}, "Socket-Type"...)
	props = binary.BigEndian.AppendUint32(props, uint32(len(socketType)))
	props = append(props, socketType...)
	return appendFrame(nil, flagCommand, command("READY", props))
}

// frame is one frame read.
type frame struct {
	flags byte
	body  []byte
}

// readFrame reads one frame of at most limit bytes into buf (grown as
// needed) and returns it; the body aliases buf.
func readFrame(r *bufio.Reader, buf []byte, limit int) (frame, []byte, error) {
	flags, err := r.ReadByte()
	if err != nil {
		return frame{}, buf, err
	}
	if flags&^(flagMore|flagLong|flagCommand) != 0 {
		return frame{}, buf, fmt.Errorf("zmtp: bad frame flags %#x", flags)
	}
	var n uint64
	if flags&flagLong != 0 {
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return frame{}, buf, unexpected(err)
		}
		n = binary.BigEndian.Uint64(b[:])
	} else {
		c, err := r.ReadByte()
		if err != nil {
			return frame{}, buf, unexpected(err)
		}
		n = uint64(c)
	}
	if n > uint64(limit) {
		return frame{}, buf, fmt.Errorf("zmtp: a frame of %d bytes is over the %d allowed", n, limit)
	}
	// The buffer grows only as the bytes arrive, so a length a peer claims
	// but never sends reserves no memory.
	body := buf[:0]
	for uint64(len(body)) < n {
		if len(body) == cap(body) {
			body = slices.Grow(body, int(min(n-uint64(len(body)), readChunk)))
		}
		m, err := r.Read(body[len(body):min(uint64(cap(body)), n)])
		body = body[:len(body)+m]
		if err != nil && uint64(len(body)) < n {
			return frame{}, body, unexpected(err)
		}
	}
	return frame{flags: flags, body: body}, body, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseCommand splits a command body into its name and data.
func parseCommand(body []byte) (name string, data []byte, err error) {
	if len(body) < 1 || int(body[0]) > len(body)-1 {
		return "", nil, errors.New("zmtp: malformed command")
	}
	n := int(body[0])
	return string(body[1 : 1+n]), body[1+n:], nil
}

// socketType returns the Socket-Type property of a READY command's data.
func socketType(props []byte) (string, error) {
	for len(props) > 0 {
		n := int(props[0])
		if len(props) < 1+n+4 {
			return "", errors.New("zmtp: malformed READY property")
		}
		name := string(props[1 : 1+n])
		props = props[1+n:]
		vlen := binary.BigEndian.Uint32(props)
		props = props[4:]
		if uint64(vlen) > uint64(len(props)) {
			return "", errors.New("zmtp: malformed READY property value")
		}
		if name == "Socket-Type" {
			return string(props[:vlen]), nil
		}
		props = props[vlen:]
	}
	return "", errors.New("zmtp: READY without a Socket-Type")
}

// handshake sends this side's greeting and READY, and reads the peer's,
// checking that its socket type is one of want. Commands other than READY
// before it are an error.
func handshake(rw io.Writer, r *bufio.Reader, mine string, want ...string) error {
	out := append(greeting(), ready(mine)...)
	if _, err := rw.Write(out); err != nil {
		return fmt.Errorf("zmtp handshake: %w", err)
	}
	if err := readGreeting(r); err != nil {
		return err
	}
	f, _, err := readFrame(r, nil, maxReady)
	if err != nil {
		return fmt.Errorf("zmtp handshake: %w", unexpected(err))
	}
	if f.flags&flagCommand == 0 {
		return errors.New("zmtp handshake: a message before READY")
	}
	name, data, err := parseCommand(f.body)
	if err != nil {
		return err
	}
	if name == "ERROR" {
		return fmt.Errorf("zmtp handshake: peer refused: %q", data)
	}
	if name != "READY" {
		return fmt.Errorf("zmtp handshake: %q before READY", name)
	}
	st, err := socketType(data)
	if err != nil {
		return err
	}
	for _, w := range want {
		if st == w {
			return nil
		}
	}
	return fmt.Errorf("zmtp handshake: a %s socket cannot talk to a %s socket", mine, st)
}
