// Package vllmgrpc is the wire form of vLLM's gRPC engine API, the service
// vllm.grpc.engine.VllmEngine that vLLM's gRPC entrypoint serves and the
// upstream endpoint picker routes: its messages encoded and decoded by hand
// with protowire, so neither the simulator nor the tests need generated
// code. Only the fields the simulator reads or writes are modelled; every
// other field is skipped on decode, as protobuf requires.
//
// Field numbers follow vllm_engine.proto (GenerateRequest: request_id 1,
// tokenized 2, text 3, sampling_params 4, stream 5; GenerateResponse: chunk
// 1, complete 2; and so on, as each type documents).
package vllmgrpc

// Service is the full name of the gRPC service.
const Service = "vllm.grpc.engine.VllmEngine"

// The methods' full names, as a gRPC request's :path carries them.
const (
	MethodGenerate      = "/" + Service + "/Generate"
	MethodEmbed         = "/" + Service + "/Embed"
	MethodHealthCheck   = "/" + Service + "/HealthCheck"
	MethodAbort         = "/" + Service + "/Abort"
	MethodGetModelInfo  = "/" + Service + "/GetModelInfo"
	MethodGetServerInfo = "/" + Service + "/GetServerInfo"
)

// Finish reasons of a GenerateComplete.
const (
	FinishLength = "length"
	FinishStop   = "stop"
	FinishAbort  = "abort"
)
