package extproc

import (
	"fmt"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// The guard invariant, which everything in this package serves:
//
//	A stream carries one request. That request takes at most one load guard,
//	once, when it is routed, and the guard is released exactly once before
//	Process returns — whatever the peer sends, in whatever order, and however
//	the stream ends. Moving to a fallback releases the guard and takes the
//	fallback's in its place, so a stream never holds two at a time on
//	the pods it is decoded on. A request whose prompt another pod
//	prefills (Options.Disaggregation) also holds a guard on that pod,
//	taken with the first, and released exactly once too: when a served
//	response's headers arrive, or with the request's end; a fallback keeps
//	it.
//
// The exchange enforces it with a state machine over the ext_proc messages.
// Routing happens only on the transition out of the request phase, and no
// transition leads back into it, so no sequence of messages can route a
// stream twice. A message the current state does not accept ends the stream
// with an InvalidArgument status naming it, after the guard is released.

// state is where a stream is in its one request/response exchange.
type state uint8

const (
	// awaitingRequest: nothing received yet; only request headers may come.
	awaitingRequest state = iota
	// readingRequest: headers received, the body is being buffered. Body
	// chunks come until one ends the stream, or trailers end it.
	readingRequest
	// awaitingResponse: the request was routed (or answered locally by the
	// gateway before routing); response headers come next. A tunnel's
	// bytes from the client (the exchange's tunnel) are accepted then and
	// in any later state, which they leave as it is.
	awaitingResponse
	// awaitingTrailers: the request was routed on its headers while the
	// gateway sends no body (mode NONE); its trailers may come, or the
	// response headers. The trailers stay due after the response headers
	// (the exchange's trailersDue): they are accepted then in any later
	// state, which they leave as it is.
	awaitingTrailers
	// readingResponse: response headers received; body chunks and trailers.
	readingResponse
	// finished: the response ended; nothing more may come.
	finished
)

var stateNames = [...]string{"awaiting_request", "reading_request", "awaiting_response", "awaiting_trailers", "reading_response", "finished"}

func (s state) String() string { return stateNames[s] }

// message is the kind of one ext_proc request message.
type message uint8

const (
	msgNone message = iota // the oneof is unset
	msgRequestHeaders
	msgRequestBody
	msgRequestTrailers
	msgResponseHeaders
	msgResponseBody
	msgResponseTrailers
)

var messageNames = [...]string{"none", "request_headers", "request_body", "request_trailers", "response_headers", "response_body", "response_trailers"}

func (m message) String() string { return messageNames[m] }

func messageOf(req *extprocv3.ProcessingRequest) message {
	switch req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return msgRequestHeaders
	case *extprocv3.ProcessingRequest_RequestBody:
		return msgRequestBody
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return msgRequestTrailers
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return msgResponseHeaders
	case *extprocv3.ProcessingRequest_ResponseBody:
		return msgResponseBody
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return msgResponseTrailers
	default:
		return msgNone
	}
}

// accepts reports whether a stream in state s may receive m.
//
// Response headers are accepted before the request was routed too: the
// gateway sends them for a reply it made itself (a timeout, another filter's
// local reply) while the request was still being read. The request is then
// over without ever having been routed, so it holds no guard and never will.
func (s state) accepts(m message) bool {
	switch m {
	case msgRequestHeaders:
		return s == awaitingRequest
	case msgRequestBody:
		return s == readingRequest
	case msgRequestTrailers:
		return s == readingRequest || s == awaitingTrailers
	case msgResponseHeaders:
		return s == readingRequest || s == awaitingResponse || s == awaitingTrailers
	case msgResponseBody, msgResponseTrailers:
		return s == readingResponse
	default:
		return false
	}
}

// violation is a message the stream's state does not accept.
type violation struct {
	msg   message
	state state
}

func (v *violation) Error() string {
	return fmt.Sprintf("ext_proc protocol violation: %s received while %s", v.msg, v.state)
}
