package app

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/inferpick/inferpick/test/framework"
)

// A replica restarted in place listens for ext_proc streams only once its
// registry has listed the pool: before, a gateway's connection is refused
// (and opened on another replica), instead of being answered 503 for a pool
// the replica has not read yet.
func TestExtProcListensOnlyOnceThePoolIsListed(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePortT(t))
	synced := make(chan struct{})
	g := &grpcServer{name: "ext_proc", srv: grpc.NewServer(), addr: addr, drain: time.Second, after: synced}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- g.Start(ctx) }()

	if c, err := net.Dial("tcp", addr); err == nil {
		_ = c.Close()
		t.Fatal("the ext_proc port accepted a connection before the pool was listed")
	}
	close(synced)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ext_proc port still refuses connections after the pool was listed: %v", err)
		}
		select {
		case err := <-done:
			t.Fatalf("the server ended: %v", err)
		case <-time.After(10 * time.Millisecond): // a retry interval, not a wait for an event
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

// A replica stopped before its pool was listed ends without having tried to
// listen: its port is held by another listener here, so a listen would fail.
func TestExtProcStopsBeforeThePoolIsListed(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Close() }()
	g := &grpcServer{name: "ext_proc", srv: grpc.NewServer(), addr: held.Addr().String(), drain: time.Second, after: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := g.Start(ctx); err != nil {
		t.Errorf("Start listened before the pool was listed: %v", err)
	}
}
