package extproc

import (
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// healthCheckPath is the gRPC health service's unary Check method, which a
// gateway's health checker calls on the ext_proc cluster's own port.
const healthCheckPath = "/grpc.health.v1.Health/Check"

// HealthChecker answers a gRPC health check of a service name: its serving
// status, or a gRPC status error (NOT_FOUND for a name it does not know).
type HealthChecker func(service string) (healthpb.HealthCheckResponse_ServingStatus, error)

// maxHealthRequest bounds a health check's request: a service name.
const maxHealthRequest = 1 << 10

// maxHealthCalls bounds the health checks a connection may have waiting for
// their requests' end; a checker sends one at a time.
const maxHealthCalls = 16

// healthCall is a health check whose request is still arriving; reader
// goroutine only.
type healthCall struct{ req []byte }

// openHealthCall starts the health check on stream id, answered once the
// client ends its side.
func (c *directConn) openHealthCall(id uint32, ended bool) {
	switch {
	case ended:
		c.answerHealth(id, nil)
	case len(c.health) >= maxHealthCalls:
		c.writeLocked(func() error { return c.fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) })
	default:
		c.health[id] = &healthCall{}
	}
}

// healthTrailers ends a health check whose client closed its side with
// trailers rather than with its last DATA frame.
func (c *directConn) healthTrailers(f *http2.MetaHeadersFrame) {
	hc := c.health[f.StreamID]
	if hc == nil {
		return
	}
	delete(c.health, f.StreamID)
	if !f.StreamEnded() {
		c.writeLocked(func() error {
			return c.writeStatus(f.StreamID, status.New(codes.Internal, "trailers without END_STREAM"), false, true)
		})
		return
	}
	c.answerHealth(f.StreamID, hc.req)
}

// healthData gathers a health check's request. It reports whether the
// frame belonged to one.
func (c *directConn) healthData(f *http2.DataFrame) bool {
	hc := c.health[f.StreamID]
	if hc == nil {
		return false
	}
	if len(hc.req)+len(f.Data()) > maxHealthRequest {
		delete(c.health, f.StreamID)
		c.writeLocked(func() error {
			return c.writeStatus(f.StreamID, status.New(codes.ResourceExhausted, "a health check request is a service name"), false, !f.StreamEnded())
		})
		return true
	}
	hc.req = append(hc.req, f.Data()...)
	if f.StreamEnded() {
		delete(c.health, f.StreamID)
		c.answerHealth(f.StreamID, hc.req)
	}
	return true
}

// answerHealth answers the health check on stream id whose framed request
// is req (none: the empty service name).
func (c *directConn) answerHealth(id uint32, req []byte) {
	st, err := c.checkHealth(req)
	var reply []byte
	if err == nil {
		reply, err = frameMessage(&healthpb.HealthCheckResponse{Status: st})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && (int64(len(reply)) > c.sendWindow || len(reply) > int(c.peerWindow)) {
		// A connection whose window the other streams' replies have used
		// up: the checker learns nothing better than that.
		err = status.Error(codes.Unavailable, "no flow-control window for the health check's answer")
	}
	if err != nil {
		_ = c.writeStatus(id, status.Convert(err), false, false)
		return
	}
	if c.writeHeaderBlock(id, false, fieldStatusOK, fieldGRPCType) != nil || c.fr.WriteData(id, false, reply) != nil {
		return // the connection is closing
	}
	c.sendWindow -= int64(len(reply))
	_ = c.writeStatus(id, status.New(codes.OK, ""), true, false)
}

// checkHealth decodes the request and asks the server's health checker.
func (c *directConn) checkHealth(req []byte) (healthpb.HealthCheckResponse_ServingStatus, error) {
	in := &healthpb.HealthCheckRequest{}
	if len(req) > 0 {
		if len(req) < 5 {
			return 0, status.Error(codes.Internal, "the stream ended inside a message")
		}
		n, err := c.messageLength(req)
		if err != nil {
			return 0, err
		}
		if len(req)-5 != n {
			return 0, status.Error(codes.Internal, "a health check carries one message")
		}
		if err := proto.Unmarshal(req[5:], in); err != nil {
			return 0, status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
		}
	}
	return c.d.opts.Health(in.GetService())
}

// frameMessage marshals m behind its gRPC message prefix.
func frameMessage(m proto.Message) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "grpc: error while marshaling: %v", err)
	}
	out := make([]byte, 5, 5+len(b))
	grpcPrefix(out[:5:5], len(b))
	return append(out, b...), nil
}
