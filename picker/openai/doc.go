// Package openai reads the parts of OpenAI-style traffic that the picker needs,
// on the request hot path and without decoding whole documents.
//
// Parse reads a request body in one validating pass: it extracts the model,
// the streaming options and the prompt as segments that alias the body, so a
// 32 KB chat costs microseconds and no allocation once a Request is warm.
//
// StreamScanner follows a response as it streams back, chunk by chunk, and
// reports the first output token, the token usage and the end of the stream
// while holding no more than one bounded event in memory.
//
// ParseGRPC and StreamScanner.ResetGRPC do the same for vLLM's gRPC engine
// API (service vllm.grpc.engine.VllmEngine): a Generate or Embed request
// fills the same Request, its prompt read from the protobuf message
// without decoding it, and the response's messages give the first token,
// the end and the usage as they stream back.
package openai
