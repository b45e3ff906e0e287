package scrape

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestReadResponse(t *testing.T) {
	tests := map[string]struct {
		in         string
		wantStatus int
		wantBody   string
		wantKeep   bool
		wantErr    error // this error
		wantFail   bool  // some error
	}{
		"content length": {
			in:         "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
			wantStatus: 200, wantBody: "hello", wantKeep: true,
		},
		"chunked, extension and trailer": {
			in:         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2 \r\nlo\r\n0\r\nX-T: 1\r\n\r\n",
			wantStatus: 200, wantBody: "hello", wantKeep: true,
		},
		"connection close": {
			in:         "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
			wantStatus: 200, wantBody: "ok",
		},
		"body to the end of the connection": {
			in:         "HTTP/1.1 200 OK\r\n\r\nall of it",
			wantStatus: 200, wantBody: "all of it",
		},
		"HTTP/1.0 keep-alive": {
			in:         "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 2\r\n\r\nok",
			wantStatus: 200, wantBody: "ok", wantKeep: true,
		},
		"interim response first": {
			in:         "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			wantStatus: 200, wantBody: "ok", wantKeep: true,
		},
		"not found": {
			in:         "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found",
			wantStatus: 404,
		},
		"content length over the cap":   {in: "HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n", wantStatus: 200, wantErr: errTooLarge},
		"chunks over the cap":           {in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + strings.Repeat("x", 64) + "\r\n1\r\nx\r\n0\r\n\r\n", wantStatus: 200, wantErr: errTooLarge},
		"unterminated body":             {in: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", wantStatus: 200, wantErr: io.ErrUnexpectedEOF},
		"signed length":                 {in: "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nok", wantFail: true},
		"two lengths":                   {in: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", wantFail: true},
		"gzip":                          {in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", wantFail: true},
		"not HTTP":                      {in: "SSH-2.0-OpenSSH\r\n\r\n", wantFail: true},
		"bare LF":                       {in: "HTTP/1.1 200 OK\nContent-Length: 2\n\nok", wantFail: true},
		"space in a header name":        {in: "HTTP/1.1 200 OK\r\nContent Length: 2\r\n\r\nok", wantFail: true},
		"chunk without its CRLF":        {in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nokX\r\n0\r\n\r\n", wantStatus: 200, wantFail: true},
		"header over the bound":         {in: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxHeaderBytes) + "\r\n\r\n", wantFail: true},
		"nothing":                       {in: "", wantErr: io.EOF},
		"cut in the status line":        {in: "HTTP/1.1 2", wantErr: io.ErrUnexpectedEOF},
		"no body for 204 even if named": {in: "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", wantStatus: 204},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			status, keep, err := readResponse(bufio.NewReaderSize(strings.NewReader(tc.in), 4096), &buf, 64)
			switch {
			case tc.wantFail:
				if err == nil {
					t.Fatalf("no error, want one (status %d, body %q)", status, buf.String())
				}
				return
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && err != nil:
				t.Fatalf("error %v, want none", err)
			}
			if status != tc.wantStatus {
				t.Errorf("status %d, want %d", status, tc.wantStatus)
			}
			if err == nil && (buf.String() != tc.wantBody || keep != tc.wantKeep) {
				t.Errorf("body %q keep %v, want %q keep %v", buf.String(), keep, tc.wantBody, tc.wantKeep)
			}
		})
	}
}

// TestPageConnKeepsAndRedials: scrapes reuse one connection, and a
// connection the server dropped between two scrapes is replaced without a
// failed scrape.
func TestPageConnKeepsAndRedials(t *testing.T) {
	srv := newModelServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") == "" {
			http.Error(w, "no accept header", http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "page of "+r.URL.Path)
	})
	c := newPageConn(srv.addr().String(), "/metrics", time.Second)
	defer c.close()
	var buf bytes.Buffer
	get := func() {
		t.Helper()
		status, err := c.get(t.Context(), c.req, time.Now().Add(time.Minute), &buf, 1<<10)
		if err != nil || status != 200 || buf.String() != "page of /metrics" {
			t.Fatalf("got %d %q %v, want 200 %q", status, buf.String(), err, "page of /metrics")
		}
	}
	get()
	first := c.conn
	get()
	if c.conn != first {
		t.Error("second scrape dialled a new connection, want the first kept")
	}
	srv.CloseClientConnections()
	get()
	if c.conn == first {
		t.Error("scrape after the server dropped the connection kept it")
	}
}

// TestPageConnReadBuffer: the read buffer grows to hold a page larger than
// it, within its bound, on the same connection.
func TestPageConnReadBuffer(t *testing.T) {
	tests := map[string]struct {
		size int
		want int
	}{
		"small page":    {size: 100, want: minReadBuffer},
		"larger page":   {size: 30 << 10, want: 32 << 10},
		"page too long": {size: 200 << 10, want: maxReadBuffer},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			body := strings.Repeat("x", tc.size)
			srv := newModelServer(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) })
			c := newPageConn(srv.addr().String(), "/metrics", time.Minute)
			defer c.close()
			var buf bytes.Buffer
			for range 2 {
				if status, err := c.get(t.Context(), c.req, time.Now().Add(time.Minute), &buf, 1<<20); err != nil || status != 200 || buf.Len() != tc.size {
					t.Fatalf("got %d, %d bytes, %v; want 200, %d bytes", status, buf.Len(), err, tc.size)
				}
			}
			if got := c.r.Size(); got != tc.want {
				t.Errorf("read buffer %d bytes, want %d", got, tc.want)
			}
		})
	}
}

// TestPageConnStrayBytes: bytes a server sends after an answer are not
// read as the next answer; the next scrape dials a new connection.
func TestPageConnStrayBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for n := 0; ; n++ {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(r)
					if err != nil {
						return
					}
					_ = req.Body.Close()
					body := "conn " + strconv.Itoa(n)
					_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body+"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstray")
				}
			}()
		}
	}()
	c := newPageConn(ln.Addr().String(), "/metrics", time.Minute)
	defer c.close()
	var buf bytes.Buffer
	for _, want := range []string{"conn 0", "conn 1"} {
		if status, err := c.get(t.Context(), c.req, time.Now().Add(time.Minute), &buf, 1<<10); err != nil || status != 200 || buf.String() != want {
			t.Fatalf("got %d %q %v, want 200 %q", status, buf.String(), err, want)
		}
	}
}

// TestPageConnAbort: abort ends a fetch waiting on a server that does not
// answer, and every fetch after it fails without a request.
func TestPageConnAbort(t *testing.T) {
	arrived := make(chan struct{}, 1)
	srv := newModelServer(t, nil)
	srv.set(srv.hang(arrived, true))
	c := newPageConn(srv.addr().String(), "/metrics", time.Hour)
	defer c.close()
	done := make(chan error, 1)
	go func() {
		var buf bytes.Buffer
		_, err := c.get(t.Context(), c.req, time.Now().Add(time.Hour), &buf, 1<<10)
		done <- err
	}()
	recv(t, arrived, "the request")
	c.abort()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("aborted fetch succeeded")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("abort did not end the fetch")
	}
	var buf bytes.Buffer
	if _, err := c.get(t.Context(), c.req, time.Now().Add(time.Hour), &buf, 1<<10); !errors.Is(err, errAborted) {
		t.Errorf("fetch after abort: error %v, want %v", err, errAborted)
	}
	select {
	case <-arrived:
		t.Error("a fetch after abort reached the server")
	default:
	}
}

// FuzzReadResponse checks that readResponse never panics, keeps to its cap,
// and reads what net/http reads whenever both accept a 200 response.
func FuzzReadResponse(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nto the end",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 503 Busy\r\nConnection: close\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	const limit = 256
	f.Fuzz(func(t *testing.T, in []byte) {
		var buf bytes.Buffer
		status, _, err := readResponse(bufio.NewReaderSize(bytes.NewReader(in), 4096), &buf, limit)
		if buf.Len() > limit {
			t.Fatalf("read %d bytes, over the cap of %d", buf.Len(), limit)
		}
		if err != nil || status != 200 {
			return
		}
		// net/http's client skips interim responses as readResponse does.
		br := bufio.NewReader(bytes.NewReader(in))
		resp, err := http.ReadResponse(br, nil)
		for err == nil && resp.StatusCode >= 100 && resp.StatusCode <= 199 && resp.StatusCode != 101 {
			resp, err = http.ReadResponse(br, nil)
		}
		if err != nil {
			return
		}
		defer resp.Body.Close()
		want, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
		if err != nil {
			return
		}
		if resp.StatusCode != status || !bytes.Equal(want, buf.Bytes()) {
			t.Fatalf("read %d %q, net/http reads %d %q (input %s)", status, buf.Bytes(), resp.StatusCode, want, strconv.Quote(string(in)))
		}
	})
}
