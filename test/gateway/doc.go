// Package gateway is a test harness: a stand-in for an Envoy gateway running the
// ext_proc HTTP filter in front of an InferencePool. No Envoy binary can be run in
// this project's test environments, so every integration test, the demo and the
// benchmarks drive the picker through this package. It is not a production proxy.
//
// One downstream HTTP request is handled the way Envoy handles it when configured
// as the endpoint-picker protocol expects:
//
//   - One ext_proc gRPC stream (envoy.service.ext_proc.v3.ExternalProcessor/Process)
//     per downstream request. The processing mode is request headers SEND, request
//     body FULL_DUPLEX_STREAMED, response headers SEND, response body
//     FULL_DUPLEX_STREAMED, response trailers SEND (a full-duplex body requires
//     it); the first message carries the protocol_config that says so.
//   - request_headers carry the pseudo-headers (:authority, :path, :method, :scheme)
//     and every header as raw_value bytes; end_of_stream is true when there is no
//     body. The body follows at once as request_body chunks without waiting for the
//     headers reply, end_of_stream on the last one. Every message carries the
//     forwarded metadata namespaces (envoy.lb.subset_hint, envoy.lb) in
//     metadata_context.
//   - Header mutations follow Envoy's default HeaderMutationRules: host, :authority,
//     :scheme, :method and x-envoy-* cannot be changed (the attempt is ignored and
//     counted), pseudo-headers cannot be removed, only raw_value is read, and a
//     content-length set by the processor is dropped because in FULL_DUPLEX_STREAMED
//     mode Envoy removes content-length from the forwarded message (see
//     WithAllowContentLength for the allow_content_length_header behaviour).
//   - dynamic_metadata is accepted for the envoy.lb namespace only (Envoy's
//     receiving namespaces) and merged into the request's metadata.
//   - The destination is chosen like Envoy's override_host load-balancing policy with
//     sources [metadata envoy.lb/x-gateway-destination-endpoint, header
//     x-gateway-destination-endpoint]: the first source with a value wins, its value
//     is ip:port[,ip:port...], the first valid address serves the first attempt and
//     the following ones serve retries.
//   - The upstream request is plain HTTP to that address with the same path and the
//     original authority, its body streamed from the picker's body replies:
//     HTTP/1.1, or HTTP/2 cleartext when the pool's appProtocol is
//     kubernetes.io/h2c (WithAppProtocol) or the request is gRPC.
//   - The response goes back through the same stream: response_headers (with :status
//     and metadata_context envoy.lb/x-gateway-destination-endpoint-served), then the
//     upstream body as response_body chunks; the picker's streamed replies are
//     written to the client as they come, flushed per chunk. When the upstream
//     ends with trailers (grpc-status, say) the last body chunk does not carry
//     end_of_stream: the trailers follow as response_trailers, and the reply to
//     them ends the body, mutates the trailers (under the same rules as
//     headers) and may carry dynamic_metadata; the client gets the trailers
//     only once that reply has come. Record.DynamicMetadata is the envoy.lb
//     metadata at the request's end. A body of declared length ends with its
//     last byte, and trailers after it are passed to the client unprocessed.
//
// # Retries and fallback
//
// Envoy retries in the router, which sits after the ext_proc filter: a retry re-runs
// the load balancer, not the HTTP filters. So the ext_proc stream stays the same for
// the whole downstream request and the router walks the endpoint list: attempt n
// goes to the n-th address of the override list, replaying the body the router
// buffered. Failed attempts are never shown to the processor; only the final
// response goes through response_headers, and its metadata_context names the
// endpoint that served it (the endpoint-picker protocol's
// x-gateway-destination-endpoint-served). A picker therefore holds one load guard
// per downstream request and learns from the served metadata which endpoint it
// ended on. When the list is exhausted Envoy falls back to the cluster's child
// policy; this stand-in has no cluster endpoint set and stops there.
//
// # Timeouts and failure mode
//
// Real Envoy arms no per-message timer for a direction whose body mode is
// FULL_DUPLEX_STREAMED (ProcessorState::onStartProcessorCall skips it), so with the
// endpoint-picker configuration message_timeout never fires. This stand-in is
// stricter by default: while it waits for a reply it fails the request when nothing
// arrives within the message timeout (default 200 ms) of the last message sent or
// received. WithMessageTimeout(0) gives Envoy's exact behaviour.
//
// On an ext_proc failure (stream cannot be opened, stream error, spurious message,
// rejected mutation, timeout) FailClose answers 504 for a timeout and 500 for the
// rest, as Envoy does. FailOpen continues without processing (a request goes to the
// default upstream, a response passes through unmodified), but only while no body
// data of a FULL_DUPLEX_STREAMED direction has passed the filter: after that Envoy
// fails closed whatever failure_mode_allow says, and so does this stand-in. Once
// response headers have been written to the client, a failure resets the
// downstream stream.
//
// When the client goes away the ext_proc stream's context is cancelled (the picker
// sees its stream end) together with the upstream request, and a client that went
// before it was answered (one that cut a declared body short and half-closed, say)
// gets its connection reset, never a response. After a normal end the
// stream is half-closed and the picker gets a grace period to finish, like Envoy's
// graceful close.
//
// # gRPC
//
// The listener takes HTTP/1.1 and HTTP/2 cleartext with prior knowledge, so
// gRPC clients reach the gateway on its plain address. A request whose
// content-type is application/grpc (or application/grpc+codec) is a gRPC
// request, as Envoy tells one: it goes upstream over h2c with te: trailers,
// and the upstream's trailers (grpc-status, grpc-message) go through the
// processor as response_trailers and reach the client after the body, once
// the processor has answered them. A trailers-only upstream answer stays
// trailers-only: the processor sees it as response headers that end the
// stream. Every local reply to a gRPC request, an
// ImmediateResponse included, is what Envoy's sendLocalReply makes of it: a
// trailers-only response, :status 200 and content-type application/grpc,
// whose grpc-status is the ImmediateResponse's grpc_status when set and
// otherwise the HTTP status mapped as Envoy's Grpc::Utility::httpToGrpcStatus
// does (400 INTERNAL, 401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 404
// UNIMPLEMENTED, 429, 502, 503 and 504 UNAVAILABLE, anything else UNKNOWN),
// and whose grpc-message is the body, percent-encoded.
//
// Not implemented: request trailers, BUFFERED body modes, mode overrides,
// override_message_timeout, attributes.
package gateway
