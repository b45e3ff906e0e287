//go:build !unix

package scrape

import (
	"errors"
	"net"
	"syscall"
)

// rawConn returns nil: requests go through net.Conn's Write and Read.
func rawConn(net.Conn) syscall.RawConn { return nil }

func sendAndRead(syscall.RawConn, []byte, []byte) (int, error) {
	return 0, errors.New("no raw connection access on this system")
}
