//go:build unix

package scrape

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// rawConn returns conn's file descriptor access, or nil.
func rawConn(conn net.Conn) syscall.RawConn {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// sendAndRead writes req and reads the first bytes of the answer into p.
// The request is written after the network poller is set to wait for the
// answer, so no read is tried before the answer can be there: one read
// system call takes it, where a write and then a read try first an empty
// read and then a second one. The request is a few hundred bytes on a
// connection that carries one at a time, so the write does not wait.
func sendAndRead(rc syscall.RawConn, req, p []byte) (int, error) {
	var (
		n    int
		err  error
		sent bool
		werr error // the request's write failed
	)
	rerr := rc.Read(func(fd uintptr) bool {
		if !sent {
			sent = true
			werr = writeAll(int(fd), req)
			return werr != nil
		}
		for {
			n, err = syscall.Read(int(fd), p)
			if !errors.Is(err, syscall.EINTR) {
				return !errors.Is(err, syscall.EAGAIN)
			}
		}
	})
	switch {
	case rerr != nil:
		return 0, rerr
	case werr != nil:
		return 0, werr
	case err != nil:
		return 0, os.NewSyscallError("read", err)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(fd, b)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return os.NewSyscallError("write", err)
		}
		b = b[n:]
	}
	return nil
}
