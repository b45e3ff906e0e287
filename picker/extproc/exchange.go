package extproc

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/inferpick/inferpick/picker/epmetrics"
	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	sessiontoken "github.com/inferpick/inferpick/picker/session"
)

// exchange is the state of one request/response pair on one stream. It is
// pooled: start resets it, finish drops every reference it holds, so nothing
// about a request outlives its stream.
type exchange struct {
	s      *Server
	stream replySink
	state  state
	out    *replies // kept across streams
	in     *inbound // the received message, decoded in place; kept across streams
	wait   recvWait // the context a queued request waits with on the grpc transport

	// request side
	kind      openai.Kind
	path      string
	post      bool     // the method is POST
	requestID string   // the gateway's, or the made one once asked for (see id)
	madeID    bool     // the id was made here: the routed request carries it
	made      [36]byte // the made id
	subset    subset
	declared  int  // content-length, 0 when absent
	follows   bool // the request headers did not end the stream: body chunks or trailers follow
	trailers  bool // trailers ended the request: no body chunk ends its stream
	// boundary is a multipart/form-data body's (an audio upload's), from
	// its content-type; "" for any other body.
	boundary string
	// grpc: the request is gRPC (its content-type says so): refusals are
	// gRPC statuses, and the response's grpc-status tells its failure
	// (grpc.go).
	grpc bool
	// uploading: the upload was routed on the front of its body (its model
	// field came first); the rest passes through as it comes, as a
	// tunnel's bytes do. frontRead is the front's length when it was last
	// read for the model.
	uploading bool
	frontRead int
	// tunnel: the request opens a tunnel (an Upgrade, such as a WebSocket,
	// or a CONNECT). It is routed on its headers; its body is the tunnel's
	// bytes, which pass through as they come, both ways, and may never end.
	tunnel bool
	// clientDone: the client's side of the tunnel ended; no byte of it
	// may come after.
	clientDone bool
	// tunnelPath: the tunnel's :path with the model its query names
	// rewritten; "" when it goes upstream as it came.
	tunnelPath string
	// trailersDue: the request was routed on its headers and the gateway
	// sends no body (mode NONE); its trailers may still come, before or
	// after the response headers, since the gateway sends each direction
	// as it comes.
	trailersDue bool
	body        []byte
	reserved    int // bytes of the body budget this stream holds
	// promptReserved is what the parsed prompt's segment list holds of the
	// body budget (see reservePrompt).
	promptReserved int
	parsed         openai.Request
	rw             modelRewrite
	pick           policy.Request
	shared         policy.Shared      // the servers' account of the prompt (Options.Locator)
	hashes         policy.Hashes      // the prompt's, from the policy's Knows to its pick; kept across streams
	allowed        []*registry.Worker // the subset hint's candidates, when there is one
	picked         []*registry.Worker // primary, then fallbacks; owned by this exchange
	pickBuf        []*registry.Worker // what an appending picker picks into; kept across streams
	rangeKey       []byte             // the prompt's context-length ranges, for the queue (admit.go); kept across streams
	dest           string
	guard          *registry.Guard
	// prefill is the load the request holds on the pod that prefills its
	// prompt for the decode pod (Options.Disaggregation), until the served
	// response's headers or the request's end; nil when it is decoded
	// alone (disagg.go).
	prefill *registry.Guard
	// encode is the load the request holds on the pod that encodes its
	// multimodal inputs for the decode pod's sidecar
	// (DisaggregationConfig.Encode), held as prefill's; nil when none does.
	encode *registry.Guard
	// prePick is the prefill pick's request; preBuf what it picks into,
	// kept across streams.
	prePick  policy.Request
	preBuf   []*registry.Worker
	pickTook time.Duration // the successful pick's duration
	// session is the pod the request's session token names; sessionErr
	// says why a token was not read (Options.SessionHeader).
	session    sessiontoken.Ref
	sessionErr error
	// sessionID is the request's session id, hashed (Options.SessionIDs).
	sessionID sessiontoken.ID

	priority   int        // from the request's InferenceObjective
	objectives objectives // the request's latency objectives (objectives.go)
	fairnessID string     // the request's flow within its priority
	arrived    time.Time
	routedAt   time.Time
	firstAt    time.Time // when the first token was seen
	// predicted is what the picker predicted of the request's latencies on
	// its primary, while the observed ones are to be learned from; reset
	// when they would mislead (a fallback served it, or it was split).
	predicted policy.Prediction
	span      trace.Span        // the request's span when tracing is on
	spanCtx   context.Context   // carries span
	series    *epmetrics.Series // the upstream series of the request's model
	running   bool              // counted in the model's running requests

	// response side
	respBytes    int
	respLength   int  // the response's content-length, -1 when absent
	bodyNotSent  bool // the gateway sends no response body (response_body_mode NONE)
	status       int
	grpcFailed   bool // a gRPC response's headers carry a grpc-status other than OK
	streamed     bool // the response streams its tokens (SSE, or a streamed gRPC call)
	scanner      openai.StreamScanner
	responseDone bool // the response completed or failed: it ends once
}

func (x *exchange) start(s *Server, stream replySink) {
	x.s, x.stream = s, stream
	if x.out == nil {
		x.out = newReplies()
	}
	if x.in == nil {
		x.in = new(inbound)
	}
}

// finish releases the guard (if a path before did not), gives the body's
// memory back to the budget and forgets the request. A body buffer still
// held (up to maxPooledBody; a routed request keeps keptBodyBytes at most)
// keeps its capacity for the next stream, which reserves it from the budget
// when it first buffers a byte.
func (x *exchange) finish() {
	x.release(reasonCancelled)
	x.s.budget.give(x.reserved)
	x.dropPrompt()
	body, allowed, pickBuf, preBuf, rangeKey := x.body[:0], x.allowed[:0], x.pickBuf[:0], x.preBuf[:0], x.rangeKey[:0]
	if cap(body) > maxPooledBody {
		body = nil // don't pin a huge buffer in the pool
	}
	clear(x.allowed[:cap(x.allowed)])
	clear(x.pickBuf[:cap(x.pickBuf)])
	clear(x.preBuf[:cap(x.preBuf)])
	x.scanner.Reset(false)
	if x.out != nil {
		x.out.clear()
	}
	if x.in != nil {
		x.in.trim()
	}
	holds := x.shared.Holds[:0]
	x.hashes.Reset()
	*x = exchange{body: body, allowed: allowed, pickBuf: pickBuf, preBuf: preBuf, rangeKey: rangeKey, parsed: x.parsed, scanner: x.scanner, out: x.out, in: x.in,
		shared: policy.Shared{Holds: holds}, hashes: x.hashes}
}

// release ends the request's load, once, and counts why. A release to
// move to a fallback keeps the request running, and its prefill pod's
// load: the fallback reads the same prefill.
func (x *exchange) release(reason string) {
	releaseGuard(x, x.guard, reason)
	if reason != reasonFallback {
		releaseGuard(x, x.prefill, reason)
		releaseGuard(x, x.encode, reason)
	}
	if x.running && reason != reasonFallback {
		x.running = false
		x.series.Ended()
	}
	if reason != reasonFallback {
		x.endSpan(reason)
	}
}

// releaseGuard releases g, once, and counts why.
func releaseGuard(x *exchange, g *registry.Guard, reason string) {
	if _, ok := g.Release(); ok {
		x.s.metrics.releases.WithLabelValues(reason).Inc()
		if q := x.s.opts.Queue; q != nil {
			q.Notify() // capacity may have freed for a waiting request
		}
	}
}

func (x *exchange) send(r *extprocv3.ProcessingResponse) error { return x.stream.Send(r) }

// id is the request's id: the gateway's, or the one made here, which
// becomes a string only when something asks for it (a log line, a span,
// a rewrite rule); the routed request's header takes its bytes.
func (x *exchange) id() string {
	if x.requestID == "" && x.madeID {
		x.requestID = string(x.made[:])
	}
	return x.requestID
}

// handle processes one message. It reports done when the stream should end
// (an immediate response was sent). A message the stream's state does not
// accept is a *violation error.
func (x *exchange) handle(req *extprocv3.ProcessingRequest) (done bool, err error) {
	if m := messageOf(req); !x.state.accepts(m) && !x.due(m) {
		return true, &violation{msg: m, state: x.state}
	}
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return x.requestHeaders(req, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		if x.tunnel || x.uploading {
			return false, x.tunnelBytes(r.RequestBody, true)
		}
		return x.requestBody(r.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if x.trailersDue { // routed on its headers: the trailers pass
			x.trailersDue = false
			if x.state == awaitingTrailers {
				x.state = awaitingResponse
			}
			return false, x.send(continueRequestTrailers)
		}
		x.trailers = true
		if done, err := x.route(); done || err != nil {
			return done, err
		}
		return false, x.send(continueRequestTrailers)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return false, x.responseHeaders(req, r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return false, x.responseBody(r.ResponseBody)
	default: // response trailers
		x.state = finished
		if x.grpc && grpcStatusOf(req.GetResponseTrailers().GetTrailers().GetHeaders()) != 0 {
			// A gRPC call fails in its trailers, after HTTP 200: by a
			// status other than OK, or by none a client could read.
			x.upstreamFailed()
		}
		x.completed()
		return false, x.send(x.out.endTrailers(x.reportUsage()))
	}
}

// testHookArrived, when set, runs once a request's arrival is recorded.
var testHookArrived func()

func (x *exchange) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) (bool, error) {
	x.state = readingRequest
	x.arrived = x.s.opts.Clock.Now()
	if testHookArrived != nil {
		testHookArrived()
	}
	if !x.s.opts.IgnoreSubsetHint {
		x.subset = readSubset(req.GetMetadataContext())
	}
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.GetKey() {
		case ":path":
			x.path = pathValue(hv)
		case ":method":
			m := headerValue(hv)
			x.tunnel = x.tunnel || m == "CONNECT"
			x.post = m == "POST"
		case "upgrade":
			x.tunnel = x.tunnel || upgradesToTunnel(headerValue(hv))
		case "content-length":
			if n, err := strconv.Atoi(headerValue(hv)); err == nil && n > 0 {
				x.declared = n
			}
		case "content-type":
			x.boundary = formBoundary(hv)
			x.grpc = isGRPC(hv)
		case RequestIDHeader:
			x.requestID = textValue(hv)
		case ObjectiveHeader:
			x.readPriority(textValue(hv))
		case FairnessHeader:
			x.fairnessID = textValue(hv)
		case policy.TTFTObjectiveHeader, policy.TPOTObjectiveHeader:
			x.objectives.read(hv)
		case ModelRewriteHeader:
			x.rw.header = textValue(hv)
		default:
			if sh := x.s.opts.SessionHeader; sh != "" && hv.GetKey() == sh {
				x.readSession(hv)
			}
		}
	}
	// Headers that end the request end it: no tunnel's bytes follow them.
	x.tunnel = x.tunnel && !h.GetEndOfStream()
	if x.requestID == "" {
		x.made, x.madeID = newRequestID(), true
	}
	x.startSpan(h.GetHeaders().GetHeaders())
	x.kind = openai.KindOf(x.path)
	if x.kind.GRPC() && !x.grpc {
		// What a gRPC server answers a request it cannot read as gRPC;
		// refused here, it holds no load and says why.
		return x.reject(415, notGRPCReason(h.GetHeaders().GetHeaders()))
	}
	if reason := x.objectives.refusal(); reason != "" {
		if x.s.readsObjectives() {
			return x.reject(400, reason)
		}
		// Nothing here acts on them: ignored, as the upstream picker
		// ignores a value it cannot read.
		x.objectives = objectives{}
	}
	x.objectives.slo.Sheddable = x.priority < 0
	withBody := true
	if pc := req.GetProtocolConfig(); pc != nil { // the stream's first message says how the gateway sends bodies
		if reason := unsupportedModes(pc); reason != "" {
			return x.reject(500, reason)
		}
		withBody = pc.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_NONE
		x.bodyNotSent = pc.GetResponseBodyMode() == extprocfilterv3.ProcessingMode_NONE
	}
	if x.tunnel && withBody {
		// The client waits for the upstream's answer before it sends a
		// byte, and the bytes that follow never end: route now.
		return x.route()
	}
	if x.declared > x.s.opts.MaxBodyBytes && withBody && !x.upload() {
		// An upload may be routed on its front (see routeFront); only the
		// bytes held before it is count against the limit.
		return x.reject(413, "request body of "+strconv.Itoa(x.declared)+" bytes is over the limit of "+strconv.Itoa(x.s.opts.MaxBodyBytes))
	}
	if h.GetEndOfStream() {
		// No body: route without a prompt, and answer the headers now.
		return x.route()
	}
	if !withBody {
		// A body not sent here: route without a prompt now; the request's
		// trailers may still come.
		done, err := x.route()
		if !done && err == nil {
			x.state, x.trailersDue = awaitingTrailers, true
		}
		return done, err
	}
	x.follows = true
	return false, nil
}

func (x *exchange) requestBody(b *extprocv3.HttpBody) (bool, error) {
	chunk := b.GetBody()
	if len(x.body)+len(chunk) > x.s.opts.MaxBodyBytes {
		reason := "request body is over the limit of " + strconv.Itoa(x.s.opts.MaxBodyBytes) + " bytes"
		if x.upload() {
			reason += "; an upload larger than that is routed only when its model field comes before its file"
		}
		return x.reject(413, reason)
	}
	// An upload may declare more than the limit (see routeFront): the
	// buffer grows to the limit at most.
	body, reserved, ok := x.s.budget.grow(x.body, x.reserved, len(chunk), min(x.declared, x.s.opts.MaxBodyBytes))
	x.body, x.reserved = body, reserved
	if !ok {
		return x.reject(429, "the picker is buffering as many request bodies as its memory budget allows")
	}
	x.body = append(x.body, chunk...)
	if !b.GetEndOfStream() {
		if x.routeFront() {
			return x.route()
		}
		return false, nil
	}
	return x.route()
}

// route parses the body, picks the endpoints, takes the guard and answers
// the request headers, then returns the body.
func (x *exchange) route() (bool, error) {
	x.state = awaitingResponse
	start := x.s.opts.Clock.Now()
	// A body that a chunk ended is returned even when empty: the gateway
	// holds the request until a chunk comes back marked end of stream.
	// Trailers end the request instead, and follow the body's last chunk.
	hasBody := len(x.body) > 0 || x.follows && !x.trailers
	x.pick = policy.Request{}
	switch {
	case x.tunnel:
		if reason := x.tunnelModel(); reason != "" {
			return x.reject(400, reason)
		}
	case len(x.body) == 0:
	case x.kind.GRPC():
		// vLLM's gRPC engine API names no model: the request goes to any
		// pod of the pool, as a body without a model does, and its prompt
		// is read from the protobuf message for the policy.
		x.s.checkGRPCModels()
		if err := openai.ParseGRPC(x.kind, x.body, &x.parsed); err != nil {
			return x.reject(400, err.Error())
		}
		if !x.reservePrompt() {
			return x.reject(429, "the picker is buffering as many request bodies as its memory budget allows")
		}
		x.pick = policy.Request{Prompt: x.parsed.Prompt, Tokens: x.parsed.Tokens, Hashes: &x.hashes}
		x.locate()
	case x.kind != openai.Unknown:
		if err := openai.Parse(x.kind, x.body, &x.parsed); err != nil {
			return x.reject(400, err.Error())
		}
		if !x.reservePrompt() {
			return x.reject(429, "the picker is buffering as many request bodies as its memory budget allows")
		}
		x.pick = policy.Request{Model: x.parsed.Model, CacheSalt: string(x.parsed.CacheSalt), Prompt: x.parsed.Prompt,
			Tokens: x.parsed.Tokens, Hashes: &x.hashes}
		x.rewriteModel()
		x.modelSeries(x.parsed.Model)
		x.locate()
	case x.boundary != "":
		// An upload (an audio transcription or translation): its "model"
		// field says which pods serve it, as a JSON body's does.
		if x.uploading || x.formModel(openai.FormModel) {
			x.pick = policy.Request{Model: x.parsed.Model}
			x.rewriteModel()
			x.modelSeries(x.parsed.Model)
		}
	default:
		// Other paths (tokenize, score, rerank, pooling, ...) are not ours
		// to judge, but a JSON body's "model" still says which pods serve
		// it (and a rewrite applies). Any other body (JSON without a
		// model, text) is routed by load, as it is.
		if openai.Parse(openai.Unknown, x.body, &x.parsed) == nil {
			x.pick = policy.Request{Model: x.parsed.Model}
			x.rewriteModel()
			x.modelSeries(x.parsed.Model)
		}
	}
	if x.session.Valid() {
		x.pick.Session = &x.session
	}
	x.pick.SessionID = x.sessionID
	x.pick.SLO = x.objectives.slo
	if x.s.learner != nil {
		x.pick.Predicted = &x.predicted
	}
	// The pick's latency counts the parse and the prompt's lookup, not the
	// time the request waits in the flow-control queue.
	prePick := x.s.opts.Clock.Now().Sub(start)
	if err := x.admit(); err != nil {
		if pickFailed(err) {
			x.s.upstream.ScheduleFailed(x.series)
		}
		if pp := (*pickPanic)(nil); errors.As(err, &pp) {
			return false, x.recoveredAt(pp.value, pp.stack)
		}
		if errors.Is(err, errGatewayClosed) {
			return true, x.ended(io.EOF)
		}
		status, reason, ok := refusal(err)
		if !ok {
			return false, err // the gateway cancelled the stream while the request waited
		}
		if cl := (contextLengthError{}); errors.As(err, &cl) {
			// Each prompt past the pool's ranges is refused alike: only the
			// first refusal is at the default verbosity.
			return x.rejectQuiet(status, reason, x.s.lengthRefused.Swap(true))
		}
		return x.reject(status, reason)
	}
	x.routedAt = x.s.opts.Clock.Now()
	x.logSession()
	took := prePick + x.pickTook
	x.s.metrics.pick.Observe(took.Seconds())
	x.s.metrics.request(200)
	ep := x.picked[0].Endpoint()
	x.s.upstream.Scheduled(took, x.series, ep.Name, ep.Namespace, ep.Key.Port)
	if x.picked[0].Removed() && x.s.endpoints != nil { // it left while this pick ran: its series went before this count
		x.s.endpoints.forget(ep)
	}
	if x.series != nil {
		x.series.Routed(x.priority, x.requestSize())
		x.series.Predicted(x.predicted.TTFT, x.predicted.TPOT)
		x.running = true
	}
	if x.prefill != nil || x.encode != nil {
		// Its first token comes after another pod's work: not the
		// primary's latency alone.
		x.predicted.Reset()
	}
	prefiller, encoder := "", ""
	if x.s.opts.Disaggregation != nil {
		if x.prefill != nil {
			prefiller = x.prefill.Worker().Address()
		}
		if x.encode != nil {
			encoder = x.encode.Worker().Address()
		}
		x.s.upstream.Disaggregation(x.series, x.encode != nil, x.prefill != nil)
	}

	x.dest = joinAddresses(x.picked)
	rank := ""
	if d := x.s.opts.DataParallel; d != nil {
		// The pod's sidecar on the primary port sends the request on to
		// the rank the pick holds load on.
		rank = x.dest
		x.dest = primaryAddress(x.picked[0], d.PrimaryPort)
	}
	var id []byte // only an id made here is added to the request
	if x.madeID {
		id = x.made[:]
	}
	extra := x.traceHeaders()
	if x.tunnelPath != "" {
		extra = append(extra, [2]string{":path", x.tunnelPath})
	}
	if x.uploading {
		// The rest of the body comes after the answer, and may end with
		// trailers then.
		x.trailersDue = true
	}
	if err := x.send(x.out.routeHeaders(x.dest, x.bodyLen(), hasBody, id, prefiller, encoder, rank, extra)); err != nil {
		return false, err
	}
	if hasBody {
		if err := x.sendBody(); err != nil {
			return false, err
		}
	}
	if len(x.picked) == 1 { // no fallback to tell the policy of
		x.dropBody()
	}
	return false, nil
}

// keptBodyBytes is the largest body buffer a routed request keeps, reserved,
// until its stream ends, so that the next stream reuses it; a larger one is
// let go as soon as nothing reads the body.
const keptBodyBytes = initialBodyBytes

// dropBody lets go of the request body once nothing reads it any more: it
// went upstream at routing, and the prompt, whose segments point into it, is
// read after that only to tell the policy which fallback served the request
// (followServed). A large body's memory goes back to the budget then, not
// when the stream ends, so streams in a long decode do not turn new requests
// away for lack of a budget they no longer use.
func (x *exchange) dropBody() {
	x.pick.Prompt = nil
	x.hashes.Reset() // the prompt's: outside the body budget, and of no use past the pick
	x.dropPrompt()
	if cap(x.body) <= keptBodyBytes {
		x.body = x.body[:0]
		return
	}
	x.s.budget.give(x.reserved)
	x.body, x.reserved = nil, 0
}

// locate asks Options.Locator where the servers hold the prompt, when the
// picker's own index does not know it.
func (x *exchange) locate() {
	l := x.s.opts.Locator
	if l == nil {
		return
	}
	if k, ok := x.s.picker.(knower); !ok || k.Knows(&x.pick) {
		return
	}
	found, err := l.Locate(x.stream.Context(), x.pick.Model, &x.parsed, &x.shared)
	if err != nil {
		x.s.opts.Log.V(2).Info("prompt not located", "requestID", x.id(), "err", err)
	}
	if found {
		x.pick.Shared = &x.shared
	}
}

func joinAddresses(ws []*registry.Worker) string {
	if len(ws) == 1 {
		return ws[0].Address()
	}
	n := len(ws) - 1
	for _, w := range ws {
		n += len(w.Address())
	}
	var b strings.Builder
	b.Grow(n)
	for i, w := range ws {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(w.Address())
	}
	return b.String()
}

// primaryAddress is the address of w's pod on port.
func primaryAddress(w *registry.Worker, port int) string {
	return netip.AddrPortFrom(w.Endpoint().Address.Addr(), uint16(port)).String()
}

// reject answers with a local reply and ends the exchange.
func (x *exchange) reject(code int, reason string) (bool, error) {
	return x.rejectQuiet(code, reason, false)
}

// rejectQuiet is reject, logging at V(1) when quiet, as it does a 429.
func (x *exchange) rejectQuiet(code int, reason string, quiet bool) (bool, error) {
	x.s.metrics.request(code)
	x.s.upstream.Failed(x.series, epmetrics.CodeOf(code))
	if x.span != nil {
		x.span.SetAttributes(attribute.Int("http.response.status_code", code))
		x.endSpan("rejected")
	}
	log := x.s.opts.Log
	if code == 429 || quiet {
		// Expected under load, and counted in inferpick_requests_total: at
		// the default verbosity they would flood the log.
		log = log.V(1)
	}
	if x.grpc {
		log.Info("Rejected request", "status", code, "grpcStatus", grpcCode(code).String(), "reason", clip(reason), "path", pathOnly(x.path), "requestID", x.id())
		return true, x.send(immediateGRPC(code, reason))
	}
	log.Info("Rejected request", "status", code, "reason", clip(reason), "path", pathOnly(x.path), "requestID", x.id())
	return true, x.send(immediate(code, reason))
}

// testHookResponseHeaders, when set, runs as response headers arrive.
var testHookResponseHeaders func()

func (x *exchange) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	if testHookResponseHeaders != nil {
		testHookResponseHeaders()
	}
	x.status, x.respLength, x.grpcFailed = 0, -1, false
	streaming, grpcStatus := false, false
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch hv.GetKey() {
		case ":status":
			x.status, _ = strconv.Atoi(headerValue(hv))
		case "grpc-status":
			// A trailers-only response: its status comes in its headers.
			x.grpcFailed, grpcStatus = x.grpc && grpcStatusValue(hv) != 0, true
		case "content-type":
			streaming = strings.HasPrefix(headerValue(hv), "text/event-stream")
			x.streamed = streaming || x.grpc && x.parsed.Stream
		case "content-length":
			if n, err := strconv.Atoi(headerValue(hv)); err == nil && n >= 0 {
				x.respLength = n
			}
		}
	}
	if x.grpc && h.GetEndOfStream() && !grpcStatus {
		// A trailers-only response with no status: a gRPC client fails
		// the call.
		x.grpcFailed = true
	}
	x.followServed(req.GetMetadataContext())
	x.dropBody()
	reply := continueResponseHeaders
	if x.s.opts.SessionHeader != "" && !x.s.opts.SessionIDs && x.guard != nil && x.served() {
		reply = x.sessionReply(x.guard.Worker())
	}
	if x.grpc {
		x.scanner.ResetGRPC(x.kind)
	} else {
		x.scanner.Reset(streaming)
	}
	x.state = readingResponse
	if h.GetEndOfStream() {
		x.state = finished
	}
	if x.served() {
		// The decode pod's sidecar answers once the encode pod and the
		// prefill pod have returned: their part is over, whether or not
		// a token comes through the stream (with response_body_mode NONE
		// none does).
		releaseGuard(x, x.encode, reasonEncoded)
		releaseGuard(x, x.prefill, reasonPrefilled)
	}
	switch {
	case !x.served():
		x.upstreamFailed()
	case h.GetEndOfStream():
		x.completed()
	case x.grpc:
		// A gRPC server sends its headers (initial metadata) as the call
		// starts, before the engine has run: the first message with
		// output moves the load (responseBody), or else the call's end.
	case !streaming || x.tunnel:
		// A non-streaming reply is sent whole: the output exists. An
		// open tunnel holds the server until it closes.
		x.firstToken()
	}
	return x.send(reply)
}

// followServed moves the guard when the gateway reports that a fallback
// of the picked list served the request instead of the primary. The worker
// is one of the picked objects, never looked up again by address. Response
// headers come once a stream, before any output, so the move happens at
// most once and always in prefill: the prompt is hashed again for the index
// at most once, and the time to first token is measured once.
func (x *exchange) followServed(md *corev3.Metadata) {
	v := md.GetFilterMetadata()[lbNamespace].GetFields()[ServedHeader].GetStringValue()
	if v == "" || x.guard == nil || v == x.guard.Worker().Address() {
		return
	}
	for _, w := range x.picked[1:] {
		if w.Address() != v {
			continue
		}
		phase := x.guard.Phase()
		x.release(reasonFallback)
		x.predicted.Reset() // made for the primary
		if phase == registry.Released {
			return
		}
		x.guard = w.AdmitWith(x.objectives.slo.TPOT)
		if x.status >= 200 && x.status <= 299 {
			// Only a fallback that served the request holds its prompt:
			// one that answered with an error cached nothing.
			x.s.picker.Observe(&x.pick, w)
		}
		return
	}
}

func (x *exchange) responseBody(b *extprocv3.HttpBody) error {
	if x.tunnel && x.served() {
		return x.tunnelBytes(b, false)
	}
	x.respBytes += len(b.GetBody())
	ev := x.scanner.Feed(b.GetBody())
	if b.GetEndOfStream() {
		ev |= x.scanner.End()
	}
	if ev.Has(openai.FirstToken) {
		x.firstToken()
	}
	if ev.Has(openai.Failed) {
		x.upstreamFailed()
	}
	if b.GetEndOfStream() {
		x.state = finished
	}
	if ev.Has(openai.Done) || b.GetEndOfStream() {
		x.completed()
	}
	reply := x.out.streamedBody(x.restoreModel(b.GetBody()), b.GetEndOfStream(), false)
	if !b.GetEndOfStream() {
		return x.send(reply)
	}
	// The reply that ends the response carries what it reports.
	reply.DynamicMetadata = x.reportUsage()
	err := x.send(reply)
	reply.DynamicMetadata = nil
	return err
}

// upstreamFailed ends a response the model server failed: a status outside
// 2xx, or an error event in a 2xx stream (vLLM reports a failure that comes
// after its headers went out that way). The server holds no work for the
// request any more, and the response does not count as completed.
func (x *exchange) upstreamFailed() {
	if x.responseDone {
		return
	}
	x.responseDone = true
	if x.guard != nil {
		x.s.upstream.Failed(x.series, epmetrics.CodeModelServerError)
	}
	x.release(reasonError)
}

// firstToken moves the request's load from prefill to decode and records
// its time to first token. A tunnel's 101 moves its load alone: the
// handshake is not a token. A split request's prefill guard is gone by
// then: released with the response headers that come first.
func (x *exchange) firstToken() {
	if x.guard.FirstToken() && !x.tunnel {
		now := x.s.opts.Clock.Now()
		x.firstAt = now
		x.s.metrics.ttft.Observe(now.Sub(x.routedAt).Seconds())
		whole := x.wholeResponse()
		if x.series != nil {
			x.series.FirstToken(now.Sub(x.arrived))
			if !whole {
				x.series.TTFTObjective(now.Sub(x.arrived), x.objectives.slo.TTFT)
			}
		}
		if x.streamed && x.predicted.Made() && !whole {
			// A reply sent whole has its first token at its end: its
			// time is not a time to first token.
			x.s.learner.ObserveTTFT(&x.predicted, now.Sub(x.routedAt))
		}
	}
}

// wholeResponse reports whether the picker holds the TTFT objective
// against the whole response's time (policy.SLOConfig.WholeResponse).
func (x *exchange) wholeResponse() bool {
	return x.s.learner != nil && x.s.learner.WholeResponse()
}

// learnTPOT records the time per output token of a streamed response that
// completed: the time from its first token to its end over the tokens
// after the first, as the model server counted them (the usage it
// reports), or else as its events that carried output.
func (x *exchange) learnTPOT() {
	tokens := x.scanner.Usage().CompletionTokens
	if tokens == 0 {
		tokens = x.scanner.OutputEvents()
	}
	if !x.streamed || x.firstAt.IsZero() || tokens < 2 || x.scanner.SeveralChoices() {
		return // several choices decode side by side: their tokens do not follow one another
	}
	tpot := x.s.opts.Clock.Now().Sub(x.firstAt) / time.Duration(tokens-1)
	x.series.TPOT(tpot, x.objectives.slo.TPOT)
	if x.predicted.Made() {
		x.s.learner.ObserveTPOT(&x.predicted, tpot)
	}
}

// completed ends a response that finished normally ([DONE], end of stream
// or trailers): the first time, it records the upstream series of the
// request and releases its guard.
func (x *exchange) completed() {
	if x.responseDone {
		return
	}
	x.responseDone = true
	if x.running && !x.tunnel { // a session's length is the user's, not a request's latency
		now := x.s.opts.Clock.Now()
		x.series.Completed(now.Sub(x.arrived), x.responseSize(), x.scanner.Usage())
		x.learnTPOT()
		if x.wholeResponse() {
			// The objective and what is learned for it are the whole
			// response's time, streamed or not.
			x.series.TTFTObjective(now.Sub(x.arrived), x.objectives.slo.TTFT)
			if x.predicted.Made() {
				x.s.learner.ObserveTTFT(&x.predicted, now.Sub(x.routedAt))
			}
		}
	}
	x.release(reasonCompleted)
}

// responseSize is the size of the response body: the bytes that came
// through the stream, or, when the gateway sends no body, the length its
// headers declared; -1 when the picker cannot know it.
func (x *exchange) responseSize() int {
	if x.bodyNotSent {
		return x.respLength
	}
	return x.respBytes
}

// endsWithStream reports whether the end of the stream is how the response
// ends: a served response whose body the gateway does not send, or an open
// tunnel's (the tunnel closed). Envoy closes the stream once it has nothing
// more to send, so the picker cannot tell when the body ends upstream; the
// stream's end is the longest it can know the request is alive.
func (x *exchange) endsWithStream() bool {
	return (x.tunnel || x.bodyNotSent) && x.state == readingResponse && x.served()
}

// unsupportedModes says why the gateway's body modes cannot work with the
// picker, or "". The picker answers a request's headers once its body has
// arrived, which only FULL_DUPLEX_STREAMED delivers without waiting for
// that answer; with NONE it routes on the headers alone. The buffered and
// streamed modes would hold the request until the gateway's message
// timeout.
func unsupportedModes(pc *extprocv3.ProtocolConfiguration) string {
	ok := func(m extprocfilterv3.ProcessingMode_BodySendMode) bool {
		return m == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED || m == extprocfilterv3.ProcessingMode_NONE
	}
	switch {
	case !ok(pc.GetRequestBodyMode()):
		return "the gateway's ext_proc request_body_mode is " + pc.GetRequestBodyMode().String() + "; the endpoint picker needs FULL_DUPLEX_STREAMED (or NONE, to route without the prompt)"
	case !ok(pc.GetResponseBodyMode()):
		return "the gateway's ext_proc response_body_mode is " + pc.GetResponseBodyMode().String() + "; the endpoint picker needs FULL_DUPLEX_STREAMED (or NONE)"
	}
	return ""
}
