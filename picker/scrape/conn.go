package scrape

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"sync"
	"syscall"
	"time"
)

// pageConn fetches pages of one worker over a keep-alive HTTP/1.1
// connection of its own. The poller's goroutine writes a request, built
// once, and reads the response in place: none of the goroutines, channels
// and per-request objects of a general HTTP client, which cost several
// times the parse at one scrape per worker every 50ms. A scrape's time
// limit is the connection's deadline, and cancelling the poller (abort)
// moves that deadline to the past, so a scrape arms no timer of its own.
// Scrapers given their own client (WithHTTPClient) use that client instead.
type pageConn struct {
	addr    string
	req     []byte // the whole GET request of the metrics page
	timeout time.Duration
	src     source // what r reads
	r       *bufio.Reader

	mu      sync.Mutex // guards conn against abort; only the poller changes it
	conn    net.Conn
	aborted bool
}

// maxHeaderBytes bounds a response's status line and headers.
const maxHeaderBytes = 64 << 10

// The connection's read buffer starts small and grows, up to the bound, to
// hold the largest response seen, so that a whole page already received is
// taken in one read.
const (
	minReadBuffer = 16 << 10
	maxReadBuffer = 64 << 10
)

// pageAccept is the Accept header of a metrics page request.
const pageAccept = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

func newPageConn(addr, requestURI string, timeout time.Duration) *pageConn {
	return &pageConn{addr: addr, req: request(addr, requestURI, pageAccept), timeout: timeout}
}

// retarget makes the next fetch get the page requestURI of addr, over a
// new connection: the one to the old address is closed. Only the poller's
// goroutine calls it, as it alone fetches.
func (c *pageConn) retarget(addr, requestURI string) {
	c.close()
	c.addr, c.req = addr, request(addr, requestURI, pageAccept)
}

// request is a GET of requestURI on addr accepting accept.
func request(addr, requestURI, accept string) []byte {
	return []byte("GET " + requestURI + " HTTP/1.1\r\nHost: " + addr +
		"\r\nUser-Agent: inferpick\r\nAccept: " + accept + "\r\n\r\n")
}

// errTooLarge is a body over the size cap.
var errTooLarge = errors.New("body over the size cap")

// errAborted is a fetch after abort.
var errAborted = errors.New("scrape cancelled")

// get sends req and reads the response into buf (reset first) by deadline,
// returning the status. A body over limit bytes is errTooLarge. A
// connection kept from an earlier scrape that the server has closed since
// is replaced once.
func (c *pageConn) get(ctx context.Context, req []byte, deadline time.Time, buf *bytes.Buffer, limit int64) (int, error) {
	for attempt := 0; ; attempt++ {
		reused := c.conn != nil
		if !reused {
			if err := c.dial(ctx, deadline); err != nil {
				return 0, err
			}
		}
		status, started, err := c.roundTrip(req, deadline, buf, limit)
		if err == nil || started || !reused || attempt > 0 || ctx.Err() != nil {
			return status, err
		}
	}
}

func (c *pageConn) dial(ctx context.Context, deadline time.Time) error {
	d := net.Dialer{Deadline: deadline, KeepAlive: 30 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted {
		_ = conn.Close()
		return errAborted
	}
	c.conn = conn
	c.src = source{conn: conn, raw: rawConn(conn)}
	if c.r == nil {
		c.r = bufio.NewReaderSize(&c.src, minReadBuffer)
	} else {
		c.r.Reset(&c.src)
	}
	return nil
}

// errStray is data a server sent on an idle connection, after the answer
// to the last request.
var errStray = errors.New("unexpected data on an idle connection")

// source is the connection as the read buffer sees it: the first read of
// a response sends its request.
type source struct {
	conn net.Conn
	raw  syscall.RawConn // nil where sendAndRead is not available
	req  []byte          // to send before the next read
}

func (s *source) Read(p []byte) (int, error) {
	req := s.req
	if req == nil {
		return s.conn.Read(p)
	}
	s.req = nil
	if s.raw != nil {
		return sendAndRead(s.raw, req, p)
	}
	if _, err := s.conn.Write(req); err != nil {
		return 0, err
	}
	return s.conn.Read(p)
}

// abort ends the fetch in progress, if any, at once and fails those after
// it. It may be called from any goroutine.
func (c *pageConn) abort() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.aborted = true
	if c.conn != nil {
		_ = c.conn.SetDeadline(time.Unix(1, 0))
	}
}

// roundTrip writes the request and reads the response. started reports
// whether any of the response arrived; on an error the connection is
// closed.
func (c *pageConn) roundTrip(req []byte, deadline time.Time, buf *bytes.Buffer, limit int64) (status int, started bool, err error) {
	conn := c.conn
	c.mu.Lock()
	if c.aborted {
		c.mu.Unlock()
		c.close()
		return 0, false, errAborted
	}
	// Only the read waits: a connection carries one request at a time, and
	// a few hundred bytes always fit its empty send buffer.
	err = conn.SetReadDeadline(deadline)
	c.mu.Unlock()
	if err != nil {
		c.close()
		return 0, false, err
	}
	if c.r.Buffered() != 0 {
		c.close()
		return 0, false, errStray
	}
	c.src.req = req
	_, err = c.r.Peek(1) // sends req
	c.src.req = nil
	if err != nil {
		c.close()
		return 0, false, err
	}
	buf.Reset()
	status, keep, err := readResponse(c.r, buf, limit)
	if err != nil || !keep {
		c.close()
		return status, true, err
	}
	// A response's head is a few hundred bytes.
	if size := c.r.Size(); size < maxReadBuffer && buf.Len()+1<<10 > size && c.r.Buffered() == 0 {
		c.r = bufio.NewReaderSize(&c.src, min(maxReadBuffer, 1<<bits.Len(uint(buf.Len()+1<<10))))
	}
	return status, true, nil
}

// close drops the connection; the next scrape dials again.
func (c *pageConn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn = nil
	}
}

// readResponse reads one HTTP/1.x response to a GET from r. A 200 response's
// body is appended to buf, up to limit bytes (errTooLarge past it); any
// other status is returned with its body unread and keep false. keep
// reports whether the connection can carry the next request.
func readResponse(r *bufio.Reader, buf *bytes.Buffer, limit int64) (status int, keep bool, err error) {
	var h header
	for {
		if h, err = readHeader(r); err != nil {
			return 0, false, err
		}
		// Interim responses (100 Continue, 103 Early Hints) precede the
		// real one.
		if h.status < 100 || h.status > 199 || h.status == 101 {
			break
		}
	}
	if h.status != 200 {
		return h.status, false, nil
	}
	switch {
	case h.chunked:
		err = readChunked(r, buf, limit)
	case h.length >= 0:
		if h.length > limit {
			return h.status, false, errTooLarge
		}
		buf.Grow(int(h.length))
		b := buf.AvailableBuffer()[:h.length]
		if _, err = io.ReadFull(r, b); err == nil {
			buf.Write(b)
		}
	default: // the body ends with the connection
		h.keep = false
		err = readToEOF(r, buf, limit)
	}
	if err != nil {
		return h.status, false, err
	}
	return h.status, h.keep, nil
}

// header is what readResponse needs of a response's head.
type header struct {
	status  int
	length  int64 // -1 when absent
	chunked bool
	keep    bool
}

func readHeader(r *bufio.Reader) (header, error) {
	h := header{length: -1}
	n := 0
	line, err := readLine(r, &n)
	if err != nil {
		return h, err
	}
	// HTTP/1.x SP 3DIGIT [SP reason]
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
		!isDigit(line[9]) || !isDigit(line[10]) || !isDigit(line[11]) || len(line) > 12 && line[12] != ' ' {
		return h, fmt.Errorf("malformed status line %q", line)
	}
	http11 := line[7] == '1'
	h.keep = http11
	h.status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	for {
		line, err := readLine(r, &n)
		if err != nil {
			return h, err
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return h, fmt.Errorf("malformed header line %q", line)
		}
		name, value := line[:colon], bytes.Trim(line[colon+1:], " \t")
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			v, ok := parseLength(value)
			if !ok || h.length >= 0 && h.length != v {
				return h, fmt.Errorf("bad Content-Length %q", value)
			}
			h.length = v
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if !http11 || !bytes.EqualFold(value, []byte("chunked")) || h.chunked {
				return h, fmt.Errorf("unsupported Transfer-Encoding %q", value)
			}
			h.chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				switch tok = bytes.Trim(tok, " \t"); {
				case bytes.EqualFold(tok, []byte("close")):
					h.keep = false
				case bytes.EqualFold(tok, []byte("keep-alive")) && !http11:
					h.keep = true
				}
			}
		}
	}
	if h.status == 204 || h.status == 304 {
		h.length, h.chunked = 0, false
	}
	if h.chunked {
		h.length = -1
	}
	return h, nil
}

// readLine returns the next line without its CRLF, counting its bytes
// against maxHeaderBytes in *n. The line is valid until the next read.
func readLine(r *bufio.Reader, n *int) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	*n += len(line)
	switch {
	case errors.Is(err, bufio.ErrBufferFull) || *n > maxHeaderBytes:
		return nil, errors.New("response header too long")
	case errors.Is(err, io.EOF) && len(line) > 0:
		return nil, io.ErrUnexpectedEOF
	case err != nil:
		return nil, err
	case len(line) < 2 || line[len(line)-2] != '\r':
		return nil, fmt.Errorf("line %q does not end with CRLF", line)
	}
	return line[:len(line)-2], nil
}

func readChunked(r *bufio.Reader, buf *bytes.Buffer, limit int64) error {
	var total int64
	n := 0
	for {
		line, err := readLine(r, &n)
		if err != nil {
			return err
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, ok := parseHex(bytes.TrimRight(line, " \t"))
		if !ok {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if size == 0 {
			break
		}
		if total += size; total > limit {
			return errTooLarge
		}
		buf.Grow(int(size))
		b := buf.AvailableBuffer()[:size]
		if _, err := io.ReadFull(r, b); err != nil {
			return err
		}
		buf.Write(b)
		if crlf, err := readLine(r, &n); err != nil || len(crlf) != 0 {
			return errors.New("chunk not followed by CRLF")
		}
		n = 0
	}
	for { // trailers, then the blank line
		line, err := readLine(r, &n)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
	}
}

func readToEOF(r *bufio.Reader, buf *bytes.Buffer, limit int64) error {
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	if err != nil {
		return err
	}
	if n > limit {
		buf.Truncate(int(limit))
		return errTooLarge
	}
	return nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// parseLength reads a Content-Length: decimal digits only.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, true
}

// parseHex reads a chunk size: at most 15 hex digits, so it fits an int64.
func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		var d byte
		switch {
		case isDigit(c):
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | int64(d)
	}
	return v, true
}

// isToken reports whether b is an HTTP token (a header name).
func isToken(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || bytes.IndexByte([]byte(`"(),/:;<=>?@[\]{}`), c) >= 0 {
			return false
		}
	}
	return true
}
