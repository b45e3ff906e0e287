package extproc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// processPath is the one method the direct server serves.
const processPath = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"

// HTTP/2's initial flow-control window and frame size, before SETTINGS.
const (
	initialWindow   = 65535
	initialMaxFrame = 16384
	maxWindow       = 1<<31 - 1
)

// maxPingStrikes is how many of a client's too-frequent pings are
// tolerated before the connection is closed, as in gRPC.
const maxPingStrikes = 2

// directConn is one client connection of a DirectServer. Its reader
// goroutine (serve) owns the read side and the streams' decoding; the
// write side, the stream table and the flow-control windows are shared
// with the goroutines of waiting streams and the keepalive timer, under mu.
type directConn struct {
	d      *DirectServer
	nc     net.Conn
	br     *bufio.Reader
	fr     *http2.Framer
	inline bool // streams are handled on the reader goroutine

	// Reader goroutine only (maxStreamID is written under mu as well).
	maxStreamID uint32 // the highest stream the client opened
	recvUnacked int    // bytes received since the last connection window update
	recvWindow  int64  // what the client may still send on the connection
	lastPing    time.Time
	pingStrikes int
	health      map[uint32]*healthCall // health checks still receiving

	lastRead atomic.Int64 // unix nanoseconds of the last frame read

	mu         sync.Mutex
	out        connWriter
	bw         *bufio.Writer
	werr       error // the first failed write
	henc       *hpack.Encoder
	hbuf       bytes.Buffer
	streams    map[uint32]*directStream
	peerWindow int32  // the client's initial stream window
	sendWindow int64  // the connection's send window
	maxFrame   uint32 // the largest frame the client accepts
	blocked    []*directStream
	draining   bool   // the first GOAWAY and its ping are out
	goneAway   bool   // the final GOAWAY is out: no stream after goAwayID
	goAwayID   uint32 // the last stream the GOAWAY lets finish
	sentReply  bool   // a HEADERS or DATA frame went out since the last client ping
	closed     bool
}

// serve reads the connection until it fails or closes, then ends every
// stream it still has.
func (c *directConn) serve() {
	defer c.d.forget(c)
	defer c.teardown()
	if err := c.handshake(); err != nil {
		c.d.s.opts.Log.V(1).Info("ext_proc connection failed before its first frame", "remote", c.nc.RemoteAddr().String(), "err", err.Error())
		return
	}
	stopPings := c.keepalive()
	defer stopPings()
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 16 << 20
	c.fr.SetReuseFrames()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				if se.StreamID > c.maxStreamID && se.StreamID%2 == 1 {
					// A stream refused as it opened: its frames in flight are
					// ignored like those of any ended stream.
					c.mu.Lock()
					c.maxStreamID = se.StreamID
					c.mu.Unlock()
				}
				c.resetStream(se.StreamID, se.Code, status.Error(codes.Internal, se.Error()))
				c.flushIfIdle()
				continue
			}
			var ce http2.ConnectionError
			switch {
			case errors.As(err, &ce):
				c.fail(http2.ErrCode(ce), err)
			case errors.Is(err, http2.ErrFrameTooLarge):
				c.fail(http2.ErrCodeFrameSize, err)
			}
			return
		}
		c.lastRead.Store(time.Now().UnixNano())
		if err := c.handle(f); err != nil {
			code := http2.ErrCodeProtocol
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				code = http2.ErrCode(ce)
			}
			c.fail(code, err)
			return
		}
		c.flushIfIdle()
	}
}

// handshake reads the client's preface and sends the server's settings.
func (c *directConn) handshake() error {
	_ = c.nc.SetDeadline(time.Now().Add(handshakeTimeout))
	defer func() {
		_ = c.nc.SetDeadline(time.Time{})
		c.out.renewAt = time.Time{} // the next write sets its own deadline
	}()
	if tc, ok := c.nc.(interface{ Handshake() error }); ok {
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("TLS handshake: %w", err)
		}
	}
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c.br, preface); err != nil {
		return fmt.Errorf("read preface: %w", err)
	}
	if string(preface) != http2.ClientPreface {
		return fmt.Errorf("not an HTTP/2 client preface: %q", preface)
	}
	f, err := c.fr.ReadFrame()
	if err != nil {
		return fmt.Errorf("read settings: %w", err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return fmt.Errorf("first frame is %v, want SETTINGS", f.Header().Type)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	settings := []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: streamWindow}}
	if m := c.d.opts.MaxConcurrentStreams; m > 0 {
		settings = append(settings, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: m})
	}
	c.recvWindow = connWindow
	err = c.fr.WriteSettings(settings...)
	if err == nil {
		err = c.fr.WriteWindowUpdate(0, connWindow-initialWindow)
	}
	if err == nil {
		err = c.applySettings(sf)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	c.lastRead.Store(time.Now().UnixNano())
	return err
}

// handle handles one frame; an error is a connection error.
func (c *directConn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.RSTStreamFrame:
		c.mu.Lock()
		st := c.streams[f.StreamID]
		c.mu.Unlock()
		if st != nil {
			st.event(streamEvent{err: status.Error(codes.Canceled, "stream reset by the client: "+f.ErrCode.String()), reset: true})
		}
		delete(c.health, f.StreamID)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.applySettings(f)
	case *http2.PingFrame:
		return c.onPing(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PushPromiseFrame:
		return errors.New("PUSH_PROMISE from a client")
	}
	// GOAWAY from the client opens no new streams: the open ones finish.
	// PRIORITY and frames of unknown types are ignored.
	return nil
}

// onWindowUpdate widens a send window and sends what waited for it. A
// window the client raises past 2^31-1 is a flow-control error: of the
// connection, or of the stream alone.
func (c *directConn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > maxWindow {
			c.mu.Unlock()
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
	} else if st := c.streams[f.StreamID]; st != nil {
		st.sendWindow += int64(f.Increment)
		if st.sendWindow > maxWindow {
			c.mu.Unlock()
			c.resetStream(f.StreamID, http2.ErrCodeFlowControl, status.Error(codes.Internal, "the client raised the stream's window past 2^31-1"))
			return nil
		}
	}
	c.sendBlocked()
	c.mu.Unlock()
	return nil
}

// applySettings applies and acknowledges the client's settings; c.mu held.
func (c *directConn) applySettings(f *http2.SettingsFrame) error {
	if err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - int64(c.peerWindow)
			c.peerWindow = int32(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
		case http2.SettingMaxFrameSize:
			c.maxFrame = s.Val
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := c.fr.WriteSettingsAck(); err != nil {
		return err
	}
	c.sendBlocked()
	return nil
}

// onPing answers a client's ping, and closes a connection whose client
// pings more often than KeepaliveMinTime allows.
func (c *directConn) onPing(f *http2.PingFrame) error {
	if f.IsAck() {
		if f.Data == drainPing {
			c.finalGoAway()
		}
		return nil
	}
	now := time.Now()
	c.mu.Lock()
	replied := c.sentReply
	c.sentReply = false
	c.mu.Unlock()
	if replied {
		c.pingStrikes = 0
	} else if !c.lastPing.IsZero() && now.Sub(c.lastPing) < c.d.opts.KeepaliveMinTime {
		c.pingStrikes++
		if c.pingStrikes > maxPingStrikes {
			c.mu.Lock()
			_ = c.fr.WriteGoAway(c.maxStreamID, http2.ErrCodeEnhanceYourCalm, []byte("too_many_pings"))
			_ = c.bw.Flush()
			c.mu.Unlock()
			return errTooManyPings
		}
	}
	c.lastPing = now
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fr.WritePing(true, f.Data)
}

var errTooManyPings = errors.New("too many pings")

// onHeaders opens a stream, or ends one with the client's trailers.
func (c *directConn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id <= c.maxStreamID {
		c.mu.Lock()
		st := c.streams[id]
		c.mu.Unlock()
		if st == nil {
			c.healthTrailers(f)
			return nil // a stream already ended here
		}
		if !f.StreamEnded() {
			c.resetStream(id, http2.ErrCodeProtocol, status.Error(codes.Internal, "trailers without END_STREAM"))
			return nil
		}
		c.endOfStream(st)
		return nil
	}
	if id%2 == 0 {
		return fmt.Errorf("client opened even stream %d", id)
	}
	c.mu.Lock()
	c.maxStreamID = id
	if c.goneAway && id > c.goAwayID {
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
		c.mu.Unlock()
		return nil
	}
	if m := c.d.opts.MaxConcurrentStreams; m > 0 && uint32(len(c.streams)+len(c.health)) >= m {
		// Over the limit the settings announced: refused before any work,
		// so the gateway may retry it elsewhere.
		_ = c.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	if f.PseudoValue("method") != "POST" || !isGRPCContentType(f) {
		c.writeLocked(func() error {
			if err := c.writeHeaderBlock(id, true, hpack.HeaderField{Name: ":status", Value: "415"}); err != nil {
				return err
			}
			return c.fr.WriteRSTStream(id, http2.ErrCodeNo)
		})
		return nil
	}
	if path := f.PseudoValue("path"); path == healthCheckPath && c.d.opts.Health != nil {
		c.openHealthCall(id, f.StreamEnded())
		return nil
	} else if path != processPath {
		c.writeLocked(func() error {
			return c.writeStatus(id, status.Newf(codes.Unimplemented, "unknown method %s", path), false, !f.StreamEnded())
		})
		return nil
	}
	st := &directStream{c: c, id: id}
	c.mu.Lock()
	st.sendWindow = int64(c.peerWindow)
	st.recvWindow = streamWindow
	c.streams[id] = st
	c.mu.Unlock()
	st.x = c.d.s.open(st)
	if f.StreamEnded() {
		c.endOfStream(st)
	}
	return nil
}

func isGRPCContentType(f *http2.MetaHeadersFrame) bool {
	for _, hf := range f.RegularFields() {
		if hf.Name == "content-type" {
			v := hf.Value
			return v == "application/grpc" || strings.HasPrefix(v, "application/grpc+") || strings.HasPrefix(v, "application/grpc;")
		}
	}
	return false
}

// onData gathers a stream's messages and hands each complete one over.
func (c *directConn) onData(f *http2.DataFrame) error {
	n := int(f.Length)
	if c.recvWindow -= int64(n); c.recvWindow < 0 {
		return fmt.Errorf("%w: the client sent past the connection's window", http2.ConnectionError(http2.ErrCodeFlowControl))
	}
	c.recvUnacked += n
	if c.recvUnacked >= connWindow/4 {
		inc := c.recvUnacked
		c.recvUnacked = 0
		c.recvWindow += int64(inc)
		c.writeLocked(func() error { return c.fr.WriteWindowUpdate(0, uint32(inc)) })
	}
	c.mu.Lock()
	st := c.streams[f.StreamID]
	over := false
	if st != nil {
		st.recvWindow -= int64(n)
		over = st.recvWindow < 0
	}
	c.mu.Unlock()
	if st == nil {
		if c.healthData(f) {
			return nil
		}
		if f.StreamID > c.maxStreamID {
			return fmt.Errorf("DATA on idle stream %d", f.StreamID)
		}
		return nil // a stream that ended here; its frames were in flight
	}
	if st.cancelled.Load() {
		return nil // reset, and ending on its own goroutine: the frames after are dropped
	}
	if over {
		c.resetStream(f.StreamID, http2.ErrCodeFlowControl, status.Error(codes.ResourceExhausted, "the client sent past the stream's flow-control window"))
		return nil
	}
	if pad := n - len(f.Data()); pad > 0 {
		st.consumed(pad) // padding carries no message
	}
	if err := st.gather(f.Data()); err != nil {
		if errors.Is(err, errQueueFull) {
			c.resetStream(f.StreamID, http2.ErrCodeEnhanceYourCalm, err)
			return nil
		}
		st.event(streamEvent{err: err})
		return nil
	}
	if f.StreamEnded() {
		c.endOfStream(st)
	}
	if c.inline && st.finished.Load() {
		st.releasePartial()
	}
	return nil
}

// endOfStream is the client closing its side of st.
func (c *directConn) endOfStream(st *directStream) {
	if len(st.partial) > 0 {
		st.event(streamEvent{err: status.Error(codes.Internal, "the stream ended inside a message")})
		return
	}
	st.event(streamEvent{err: io.EOF, eof: true})
}

// resetStream ends a stream the reader found broken: its request is
// released with cause and the client is told with RST_STREAM code.
func (c *directConn) resetStream(id uint32, code http2.ErrCode, cause error) {
	c.mu.Lock()
	st := c.streams[id]
	c.mu.Unlock()
	if st != nil {
		st.event(streamEvent{err: cause, reset: true})
	}
	c.writeLocked(func() error { return c.fr.WriteRSTStream(id, code) })
}

// flushIfIdle flushes the replies once every frame that had arrived is
// handled: when the read buffer does not hold a whole next frame, the
// reader is about to wait for the client.
func (c *directConn) flushIfIdle() {
	if n := c.br.Buffered(); n >= 9 {
		h, _ := c.br.Peek(9)
		if n >= 9+int(uint32(h[0])<<16|uint32(h[1])<<8|uint32(h[2])) {
			return
		}
	}
	c.mu.Lock()
	c.flushLocked()
	c.mu.Unlock()
}

func (c *directConn) flushLocked() {
	if c.bw.Buffered() > 0 && c.werr == nil {
		_ = c.bw.Flush()
	}
}

// writeLocked runs write under c.mu. A write error closes the connection
// (connWriter), so it needs no handling here.
func (c *directConn) writeLocked(write func() error) {
	c.mu.Lock()
	_ = write()
	c.mu.Unlock()
}

// fail ends the connection with GOAWAY code.
func (c *directConn) fail(code http2.ErrCode, err error) {
	c.d.s.opts.Log.V(1).Info("Closing an ext_proc connection", "remote", c.nc.RemoteAddr().String(), "err", err.Error())
	c.mu.Lock()
	_ = c.fr.WriteGoAway(c.maxStreamID, code, nil)
	c.flushLocked()
	c.mu.Unlock()
}

// goAway tells the client to open no more streams, and closes the
// connection once its streams have ended.
//
// It takes two GOAWAY frames, as a gRPC server's graceful stop does: the
// first names no last stream, so that a stream the client opened before it
// read the frame is still served, and carries a ping; the client's answer
// to the ping comes after any such stream, and the final GOAWAY then names
// the last stream opened. A stream refused instead would fail at the
// gateway after its first message, too late for a retry.
func (c *directConn) goAway() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining || c.closed {
		return
	}
	c.draining = true
	_ = c.fr.WriteGoAway(maxWindow, http2.ErrCodeNo, nil)
	_ = c.fr.WritePing(false, drainPing)
	c.flushLocked()
}

// drainPing is the payload of the ping sent with the first GOAWAY.
var drainPing = [8]byte{'d', 'r', 'a', 'i', 'n'}

// finalGoAway sends the GOAWAY that names the last stream, once the client
// has answered the drain ping; on the reader goroutine.
func (c *directConn) finalGoAway() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.draining || c.goneAway || c.closed {
		return
	}
	c.goneAway, c.goAwayID = true, c.maxStreamID
	_ = c.fr.WriteGoAway(c.goAwayID, http2.ErrCodeNo, nil)
	c.closeIfDrained()
}

// closeIfDrained closes a connection told to go away once no stream is
// left on it; c.mu held.
func (c *directConn) closeIfDrained() {
	if !c.goneAway || len(c.streams) > 0 || c.closed {
		return
	}
	// The last replies leave first; then the write side closes, and the
	// reader ends when the client closes its side, or at the deadline.
	c.flushLocked()
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.nc.SetReadDeadline(time.Now().Add(drainLinger))
		return
	}
	_ = c.nc.Close()
}

// defaultKeepaliveTimeout is DirectOptions.KeepaliveTimeout when not set,
// gRPC's default.
const defaultKeepaliveTimeout = 20 * time.Second

// drainLinger is how long a drained connection waits for the client to
// close it after the server has closed its side.
const drainLinger = 5 * time.Second

// teardown ends every stream still open as cancelled and closes the
// connection.
func (c *directConn) teardown() {
	_ = c.nc.Close()
	c.mu.Lock()
	c.closed = true
	open := make([]*directStream, 0, len(c.streams))
	for _, st := range c.streams {
		open = append(open, st)
	}
	c.mu.Unlock()
	for _, st := range open {
		st.event(streamEvent{err: status.Error(codes.Canceled, "the ext_proc connection closed"), reset: true})
		st.wait()
	}
}

// keepalive pings a connection that has been silent for KeepaliveTime and
// closes it when nothing arrives within KeepaliveTimeout after. It returns
// the function that stops it.
func (c *directConn) keepalive() (stop func()) {
	every, timeout := c.d.opts.KeepaliveTime, c.d.opts.KeepaliveTimeout
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTimer(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			silent := time.Since(time.Unix(0, c.lastRead.Load()))
			if silent < every {
				t.Reset(every - silent)
				continue
			}
			sent := c.lastRead.Load()
			c.mu.Lock()
			_ = c.fr.WritePing(false, [8]byte{'k', 'e', 'e', 'p'})
			c.flushLocked()
			c.mu.Unlock()
			t.Reset(timeout)
			select {
			case <-done:
				return
			case <-t.C:
			}
			if c.lastRead.Load() == sent {
				c.d.s.opts.Log.Info("Closing an ext_proc connection that did not answer a keepalive ping", "remote", c.nc.RemoteAddr().String(), "timeout", timeout.String())
				_ = c.nc.Close()
				return
			}
			t.Reset(every)
		}
	}()
	return func() { close(done) }
}

// writeHeaderBlock writes fields as one header block on stream id, in
// CONTINUATION frames after the first when it exceeds the frame size;
// c.mu held.
func (c *directConn) writeHeaderBlock(id uint32, end bool, fields ...hpack.HeaderField) error {
	c.hbuf.Reset()
	for _, f := range fields {
		if err := c.henc.WriteField(f); err != nil {
			return err
		}
	}
	block := c.hbuf.Bytes()
	first := block[:min(len(block), int(c.maxFrame))]
	rest := block[len(first):]
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: end, EndHeaders: len(rest) == 0}); err != nil {
		return err
	}
	for len(rest) > 0 {
		frag := rest[:min(len(rest), int(c.maxFrame))]
		rest = rest[len(frag):]
		if err := c.fr.WriteContinuation(id, len(rest) == 0, frag); err != nil {
			return err
		}
	}
	c.sentReply = true
	return nil
}

var (
	fieldStatusOK = hpack.HeaderField{Name: ":status", Value: "200"}
	fieldGRPCType = hpack.HeaderField{Name: "content-type", Value: "application/grpc"}
)

// writeStatus ends stream id with s: in trailers after the response
// headers when they were sent, else as a trailers-only response. With rst
// the stream is reset too, for a client that has not closed its side (it
// has nothing more to send that would be read); c.mu held.
func (c *directConn) writeStatus(id uint32, s *status.Status, headersSent, rst bool) error {
	var buf [4]hpack.HeaderField
	fields := buf[:0]
	if !headersSent {
		fields = append(fields, fieldStatusOK, fieldGRPCType)
	}
	fields = append(fields, hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(int(s.Code()))})
	if m := s.Message(); m != "" {
		fields = append(fields, hpack.HeaderField{Name: "grpc-message", Value: encodeGRPCMessage(m)})
	}
	if err := c.writeHeaderBlock(id, true, fields...); err != nil {
		return err
	}
	if rst {
		return c.fr.WriteRSTStream(id, http2.ErrCodeNo)
	}
	return nil
}

// encodeGRPCMessage percent-encodes a status message as gRPC's
// grpc-message header carries it: every byte outside printable ASCII, and
// '%', as %XX.
func encodeGRPCMessage(m string) string {
	clean := true
	for i := range len(m) {
		if b := m[i]; b < ' ' || b > '~' || b == '%' {
			clean = false
			break
		}
	}
	if clean {
		return m
	}
	var sb strings.Builder
	for i := range len(m) {
		if b := m[i]; b < ' ' || b > '~' || b == '%' {
			fmt.Fprintf(&sb, "%%%02X", b)
		} else {
			sb.WriteByte(b)
		}
	}
	return sb.String()
}

// sendBlocked sends what streams held back for want of window; c.mu held.
func (c *directConn) sendBlocked() {
	if len(c.blocked) == 0 || c.sendWindow <= 0 {
		return
	}
	still := c.blocked[:0]
	for _, st := range c.blocked {
		st.sendPending()
		if len(st.pending) > 0 || st.trailer != nil {
			still = append(still, st)
		}
	}
	clear(c.blocked[len(still):])
	c.blocked = still
	if c.inline {
		return // the reader flushes
	}
	c.flushLocked()
}

// grpcPrefix writes the 5-byte gRPC message prefix of an uncompressed
// message of n bytes into b.
func grpcPrefix(b []byte, n int) {
	b[0] = 0
	binary.BigEndian.PutUint32(b[1:5], uint32(n))
}
