package extproc

import (
	"context"
	"errors"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// oneMessageStream is a grpc-transport stream whose next receive gets a
// message at once (the next chunk of an upload routed on its front), and
// whose later receives wait for its reset.
type oneMessageStream struct {
	ctx      context.Context
	received bool
}

func (s *oneMessageStream) Send(*extprocv3.ProcessingResponse) error { return nil }
func (s *oneMessageStream) Context() context.Context                 { return s.ctx }

func (s *oneMessageStream) RecvMsg(any) error {
	if !s.received {
		s.received = true
		return nil
	}
	<-s.ctx.Done()
	return s.ctx.Err()
}

// A request that waits in the queue while the gateway still sends it
// messages (the rest of an upload routed on its front) leaves the queue when
// the gateway then resets the stream: its wait context ends, and the
// message received ahead is still the exchange's next.
func TestAWaitEndsAtAResetAfterAMessageReceivedAhead(t *testing.T) {
	ctx, reset := context.WithCancel(t.Context())
	stream := &oneMessageStream{ctx: ctx}
	x := &exchange{stream: stream, in: new(inbound)}
	wait := x.waitContext()
	done := wait.Done()
	<-x.wait.ahead.done // the message is received ahead
	if err := wait.Err(); err != nil {
		t.Fatalf("the wait ended (%v) on a message, want it going on", err)
	}
	reset()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a bound on the failure, not a wait for success
		t.Fatal("the wait goes on 10 s after the stream's reset: the request would keep its place in the queue")
	}
	if err := wait.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait.Err() = %v after the reset, want context.Canceled", err)
	}
	if err := x.receive(stream); err != nil {
		t.Fatalf("the message received ahead was lost: %v", err)
	}
}
