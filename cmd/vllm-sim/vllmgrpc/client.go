package vllmgrpc

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
)

// Codec carries messages as their encoded bytes: one to send is a []byte,
// one received is stored into a *[]byte. Its name is "proto", so the
// content-type on the wire is application/grpc+proto as with generated code.
type Codec struct{}

// Name implements encoding.Codec.
func (Codec) Name() string { return "proto" }

// Marshal implements encoding.Codec.
func (Codec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case []byte:
		return m, nil
	case *[]byte:
		return *m, nil
	}
	return nil, fmt.Errorf("vllmgrpc codec: cannot send %T", v)
}

// Unmarshal implements encoding.Codec.
func (Codec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("vllmgrpc codec: cannot receive into %T", v)
	}
	*m = append((*m)[:0], data...)
	return nil
}

// Client calls a VllmEngine service.
type Client struct {
	conn grpc.ClientConnInterface
}

// NewClient returns a client on conn.
func NewClient(conn grpc.ClientConnInterface) *Client { return &Client{conn: conn} }

var generateDesc = grpc.StreamDesc{StreamName: "Generate", ServerStreams: true}

// Generate sends req and returns the stream of its responses. opts are
// added to the call (grpc.Header and grpc.Trailer, say).
func (c *Client) Generate(ctx context.Context, req *GenerateRequest, opts ...grpc.CallOption) (*GenerateStream, error) {
	s, err := c.conn.NewStream(ctx, &generateDesc, MethodGenerate, append(opts, grpc.ForceCodec(Codec{}))...)
	if err != nil {
		return nil, err
	}
	if err := s.SendMsg(req.Marshal()); err != nil {
		return nil, err
	}
	if err := s.CloseSend(); err != nil {
		return nil, err
	}
	return &GenerateStream{s: s}, nil
}

// GenerateStream is the responses of one Generate call.
type GenerateStream struct {
	s grpc.ClientStream
}

// Recv returns the next response; io.EOF once the call ended with OK, or
// the call's status as an error.
func (g *GenerateStream) Recv() (*GenerateResponse, error) {
	var b []byte
	if err := g.s.RecvMsg(&b); err != nil {
		return nil, err
	}
	return decode[GenerateResponse](b)
}

func (c *Client) invoke(ctx context.Context, method string, req []byte, opts []grpc.CallOption) ([]byte, error) {
	var out []byte
	if req == nil {
		req = []byte{}
	}
	err := c.conn.Invoke(ctx, method, req, &out, append(opts, grpc.ForceCodec(Codec{}))...)
	return out, err
}

// Embed calls Embed.
func (c *Client) Embed(ctx context.Context, req *EmbedRequest, opts ...grpc.CallOption) (*EmbedResponse, error) {
	b, err := c.invoke(ctx, MethodEmbed, req.Marshal(), opts)
	if err != nil {
		return nil, err
	}
	return decode[EmbedResponse](b)
}

// HealthCheck calls HealthCheck.
func (c *Client) HealthCheck(ctx context.Context, opts ...grpc.CallOption) (*HealthCheckResponse, error) {
	b, err := c.invoke(ctx, MethodHealthCheck, nil, opts)
	if err != nil {
		return nil, err
	}
	return decode[HealthCheckResponse](b)
}

// Abort calls Abort for the requests ids.
func (c *Client) Abort(ctx context.Context, ids []string, opts ...grpc.CallOption) error {
	_, err := c.invoke(ctx, MethodAbort, (&AbortRequest{RequestIDs: ids}).Marshal(), opts)
	return err
}

// GetModelInfo calls GetModelInfo.
func (c *Client) GetModelInfo(ctx context.Context, opts ...grpc.CallOption) (*ModelInfo, error) {
	b, err := c.invoke(ctx, MethodGetModelInfo, nil, opts)
	if err != nil {
		return nil, err
	}
	return decode[ModelInfo](b)
}

// GetServerInfo calls GetServerInfo.
func (c *Client) GetServerInfo(ctx context.Context, opts ...grpc.CallOption) (*ServerInfo, error) {
	b, err := c.invoke(ctx, MethodGetServerInfo, nil, opts)
	if err != nil {
		return nil, err
	}
	return decode[ServerInfo](b)
}

// Conn returns the connection the client calls on.
func (c *Client) Conn() grpc.ClientConnInterface { return c.conn }

// decode decodes b as a T.
func decode[T any, PT interface {
	*T
	Unmarshal(b []byte) error
}](b []byte) (*T, error) {
	r := PT(new(T))
	if err := r.Unmarshal(b); err != nil {
		return nil, err
	}
	return r, nil
}
