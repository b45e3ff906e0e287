package gateway

import "google.golang.org/grpc"

// envoyWindow is Envoy's default HTTP/2 stream and connection window
// (Http2ProtocolOptions initial_stream_window_size and
// initial_connection_window_size: 256 MiB).
const envoyWindow = 256 << 20

// EnvoyDialOptions make a gRPC client connect to an ext_proc server as
// Envoy's gRPC client does: fixed windows of Envoy's default size, which
// also means none of grpc-go's bandwidth-estimation pings.
func EnvoyDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(envoyWindow), grpc.WithInitialConnWindowSize(envoyWindow)}
}
