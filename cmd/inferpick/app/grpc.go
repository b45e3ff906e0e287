package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/inferpick/inferpick/picker/extproc"
)

// grpcServer runs a gRPC server until its context ends, then drains: it
// stops accepting streams and lets in-flight ones finish for at most drain,
// after which they are cut (their handlers see their contexts end and
// release their guards).
type grpcServer struct {
	name    string
	srv     grpcService
	addr    string
	drain   time.Duration
	onDrain func()
	// after, when set, holds the listener back until it is closed: a
	// gateway that connects before then is refused and, as with a replica
	// that is down, opens its stream on another.
	after <-chan struct{}
}

// grpcService is a gRPC server: grpc-go's, or the ext_proc service's
// direct server.
type grpcService interface {
	Serve(net.Listener) error
	GracefulStop()
	Stop()
}

// NeedLeaderElection is false: every replica serves (only the leader
// reports ready).
func (g *grpcServer) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (g *grpcServer) Start(ctx context.Context) error {
	if g.after != nil {
		select {
		case <-g.after:
		case <-ctx.Done():
			return nil
		}
	}
	lis, err := net.Listen("tcp", g.addr)
	if err != nil {
		return fmt.Errorf("%s: listen on %s: %w", g.name, g.addr, err)
	}
	errc := make(chan error, 1)
	go func() { errc <- g.srv.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s: %w", g.name, err)
	case <-ctx.Done():
	}
	if g.onDrain != nil {
		g.onDrain()
	}
	stopped := make(chan struct{})
	go func() {
		g.srv.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(g.drain)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		g.srv.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, extproc.ErrDirectServerStopped) {
		return fmt.Errorf("%s: %w", g.name, err)
	}
	return nil
}
