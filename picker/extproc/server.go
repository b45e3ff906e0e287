// Package extproc is the picker's Envoy external-processing service: it
// reads each request through an ext_proc stream, picks the endpoint that
// serves it, and follows the response to keep the endpoint's load true.
package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/inferpick/inferpick/picker/attrexpr"
	"github.com/inferpick/inferpick/picker/epmetrics"
	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// Picker orders candidates for a request: primary first, then fallbacks.
type Picker interface {
	Pick(req *policy.Request, candidates []*registry.Worker, n int) ([]*registry.Worker, error)
	// Observe records that req was served by served after the gateway
	// fell back from the primary.
	Observe(req *policy.Request, served *registry.Worker)
}

// appendPicker is a Picker that appends its pick to a slice the caller
// keeps, as the policies do: the exchange then picks into its own slice,
// which it keeps from stream to stream.
type appendPicker interface {
	AppendPick(dst []*registry.Worker, req *policy.Request, candidates []*registry.Worker, n int) ([]*registry.Worker, error)
}

// Options tune the server. The zero value is usable.
type Options struct {
	// Fallbacks is how many endpoints after the primary the destination
	// header lists for the gateway to try.
	Fallbacks int
	// MaxBodyBytes caps a request body; larger bodies get 413.
	MaxBodyBytes int
	// MaxBufferedBodyBytes caps the request bodies buffered across all
	// streams; a request whose body would pass it gets 429.
	MaxBufferedBodyBytes int
	// Registerer receives the server's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Log receives one line per rejected request and per recovered panic.
	Log logr.Logger
	// Queue, when set, holds requests that find the pool saturated until
	// capacity frees. Without it a request of priority 0 or above goes past
	// the queue and KV-cache thresholds (policy.Request.Overflow), and one
	// of negative priority, or one that finds every endpoint at MaxInFlight,
	// gets 429 at once.
	Queue Admitter
	// Priorities maps the x-gateway-inference-objective header to a
	// priority for the queue; unknown objectives get 0.
	Priorities Priorities
	// MaxInFlight is the policy's maxInFlight: the most requests in flight
	// on one endpoint (less the request's reserve). The guard is taken only
	// below it, atomically, so concurrent admissions never pass it
	// together; 0 is no bound.
	MaxInFlight int
	// Reserve is the capacity on each endpoint a request of the given
	// priority leaves free for higher priorities (policy.Request.Reserve);
	// nil reserves nothing.
	Reserve func(priority int) int
	// IgnoreSubsetHint makes every endpoint of the pool a candidate,
	// whatever subset the gateway's metadata names.
	IgnoreSubsetHint bool
	// Rewrites, when set, rewrites the model of the requests its rules
	// match (InferenceModelRewrite).
	Rewrites Rewriter
	// Tracer, when set, traces each request (a span, with the pick as a
	// child) as part of the trace its headers carry; nil traces nothing.
	Tracer trace.Tracer
	// Clock stamps arrivals, picks and latencies; the real clock when nil.
	Clock clock.PassiveClock
	// Locator, when set, is asked where the model servers hold a prompt the
	// picker's own index does not know (package kvindex): what other
	// replicas placed. It may wait on the network, so the direct transport
	// then serves each stream on a goroutine of its own.
	Locator Locator
	// SessionHeader, when set, is the lower-case header that carries a
	// session token (package session) both ways: a request's names the
	// pod its pick keeps it on (the policy's sessionAffinity), and the
	// response of a served request names the pod that served it when the
	// request's token named another or none.
	SessionHeader string
	// Disaggregation, when set, names a pod that prefills to the decode
	// pod's sidecar (policy.PrefillerHeader) when the part of a request's
	// prompt the decode pod does not hold is long enough, holding load on
	// it until the decode pod answers (disagg.go). The registry's role
	// lists (Decoders, Prefillers) are the candidates; a request is
	// decoded on a pod that decodes with or without the split, and
	// without the lists every worker decodes and none prefills for
	// another. Its Encode names a pod that encodes a chat's media to
	// the sidecar (policy.EncodersHeader), among the Encoders.
	Disaggregation *policy.DisaggregationConfig
	// DataParallel, when set, sends each request to its pod's PrimaryPort,
	// naming the (pod, rank port) worker the pick guards in
	// policy.DataParallelHeader for the pod's sidecar, with no fallbacks
	// (the header names one rank).
	DataParallel *policy.DataParallelConfig
	// SessionIDs says SessionHeader carries the client's own session id
	// instead (the policy's sessionAffinity key id): it is hashed as it is
	// read, the policy places the request by it, and nothing is written on
	// the response.
	SessionIDs bool
	// LabelFilter, when set, is the policy's label filters
	// (policy.Config.LabelFilter): a worker parked in a readiness flap is
	// waited for only when it passes them, as the pick takes it only then.
	LabelFilter func(w *registry.Worker) bool
	// EncodeLabelFilter, when set, is the encode stage's label filters
	// (policy.Config.EncodeLabelFilter): the encode pod is picked only
	// among the encode pods that pass them.
	EncodeLabelFilter func(w *registry.Worker) bool
	// Attributes, when set, are reported to the gateway at the end of each
	// response whose body it sends: the reply that ends the response
	// carries dynamic metadata namespace → name → value for each attribute
	// whose condition holds and whose value is not 0, evaluated over the
	// response's token usage (upstream's request-attribute-reporter).
	Attributes []attrexpr.Attribute
}

// Locator fills dst with the model servers' account of where the parsed
// request's prompt is cached, for the given model. It reports false when it
// cannot tell.
type Locator interface {
	Locate(ctx context.Context, model string, r *openai.Request, dst *policy.Shared) (bool, error)
}

// latencyLearner is a picker that predicts each request's latencies on the
// endpoint it picks (policy.Request.Predicted) and learns from the ones
// observed.
type latencyLearner interface {
	policy.LatencyObserver
	Predicts() bool
	// WholeResponse: the TTFT objective and what is learned for it are
	// the whole response's time (policy.SLOConfig.WholeResponse).
	WholeResponse() bool
}

// knower is a picker that can tell whether its own index knows a prompt.
type knower interface {
	Knows(req *policy.Request) bool
}

// DefaultMaxBodyBytes is the body cap when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 16 << 20

// Server implements envoy.service.ext_proc.v3.ExternalProcessor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	reg      Workers
	picker   Picker
	learner  latencyLearner // the picker, when it predicts latencies; else nil
	opts     Options
	metrics  *serverMetrics
	upstream *epmetrics.Recorder
	budget   *bodyBudget
	rewrites *epmetrics.RewriteDecisions
	// endpoints follows the pool's workers by name, when reg can be
	// listened to, to delete the series of those that leave.
	endpoints *endpointSeries
	// parked lists the workers parked while their pods are unready (nil:
	// the registry parks none): a request whose model only they serve
	// waits for them.
	parked func() []*registry.Worker
	// roles are the registry's workers by role, when it keeps them; nil
	// otherwise.
	roles Roles
	// encodeTurn turns the encode pods' order, so that those equally
	// loaded take requests in turn.
	encodeTurn atomic.Uint64
	states     sync.Pool
	// attrFailed is, per attribute of opts.Attributes, whether a failure
	// of its evaluation was logged at the default verbosity.
	attrFailed []atomic.Bool
	// lengthRefused is whether a request was refused at the default
	// verbosity for a prompt no context-length range holds.
	lengthRefused atomic.Bool
	// grpcModels is 1 + the registry.ServedEpoch at which a gRPC request
	// last had the pods' base models checked (checkGRPCModels); 0 before.
	grpcModels atomic.Uint64
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// Workers is the part of the worker registry the server reads: the
// candidates of each pick.
type Workers interface {
	Workers() []*registry.Worker
}

// Roles is the part of the worker registry that lists the workers by the
// stages their pods serve (registry.Role).
type Roles interface {
	Decoders() []*registry.Worker
	Prefillers() []*registry.Worker
	Encoders() []*registry.Worker
}

var (
	_ Workers = (*registry.Registry)(nil)
	_ Roles   = (*registry.Registry)(nil)
)

// New returns a server routing over reg's workers with picker.
func New(reg Workers, picker Picker, opts Options) *Server {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxBufferedBodyBytes <= 0 {
		opts.MaxBufferedBodyBytes = DefaultMaxBufferedBodyBytes
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	budget := &bodyBudget{limit: int64(opts.MaxBufferedBodyBytes)}
	s := &Server{reg: reg, opts: opts, budget: budget,
		metrics: newServerMetrics(opts.Registerer, budget), upstream: epmetrics.NewRecorder(opts.Registerer),
		rewrites: epmetrics.NewRewriteDecisions(opts.Registerer)}
	s.upstream.OnlyServed(func(model string) bool { return policy.Served(model, reg.Workers()) })
	s.usePicker(picker)
	s.states.New = func() any { return &exchange{} }
	s.attrFailed = make([]atomic.Bool, len(opts.Attributes))
	if r, ok := reg.(Roles); ok {
		s.roles = r
	}
	if p, ok := reg.(interface{ Parked() []*registry.Worker }); ok {
		s.parked = p.Parked
	}
	if l, ok := reg.(interface{ AddListener(registry.Listener) }); ok {
		s.endpoints = &endpointSeries{s: s, live: map[endpointName]int{}, gone: map[endpointName]struct{}{}}
		l.AddListener(s.endpoints)
	}
	return s
}

// usePicker makes p the server's picker, before the first request.
func (s *Server) usePicker(p Picker) {
	s.picker, s.learner = p, nil
	if l, ok := p.(latencyLearner); ok && l.Predicts() {
		s.learner = l
		s.upstream.TrackObjectives()
	}
}

// readsObjectives reports whether anything here acts on a request's
// latency objectives: the picker's latency predictions, or a queue that
// orders by their deadlines.
func (s *Server) readsObjectives() bool {
	if s.learner != nil {
		return true
	}
	q, ok := s.opts.Queue.(interface{ ByDeadline() bool })
	return ok && q.ByDeadline()
}

// endpointSeries deletes the per-endpoint series of the workers that leave
// the pool, so that pod churn does not grow them without bound, unless a
// worker in the pool still goes by the same name and port (a pod re-created
// under its name, in the same change or not): its count goes on.
type endpointSeries struct {
	s    *Server
	mu   sync.Mutex
	live map[endpointName]int      // workers in the pool by name
	gone map[endpointName]struct{} // names that left in the change being told
}

// endpointName is what the per-endpoint series are labelled with.
type endpointName struct {
	name, namespace string
	port            int32
}

func nameOf(ep registry.Endpoint) endpointName {
	return endpointName{ep.Name, ep.Namespace, ep.Key.Port}
}

func (e *endpointSeries) WorkerAdded(w *registry.Worker) {
	e.mu.Lock()
	e.live[nameOf(w.Endpoint())]++
	e.mu.Unlock()
}

func (e *endpointSeries) WorkerRemoved(w *registry.Worker) {
	n := nameOf(w.Endpoint())
	e.mu.Lock()
	e.live[n]--
	if e.live[n] <= 0 {
		delete(e.live, n)
		e.gone[n] = struct{}{} // the change may add it back
	}
	e.mu.Unlock()
}

// Settled deletes the series of the names that left in the change and did
// not come back in it.
func (e *endpointSeries) Settled() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for n := range e.gone {
		if e.live[n] == 0 {
			e.s.upstream.ForgetEndpoint(n.name, n.namespace, n.port)
		}
	}
	clear(e.gone)
}

// forget deletes ep's series unless a worker in the pool goes by its name:
// for a pick that counted them after ep's worker left.
func (e *endpointSeries) forget(ep registry.Endpoint) {
	n := nameOf(ep)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.live[n] == 0 {
		e.s.upstream.ForgetEndpoint(n.name, n.namespace, n.port)
	}
}

// RecordBuildInfo sets the upstream-compatible build info series.
func (s *Server) RecordBuildInfo(commit, buildRef string) { s.upstream.Info(commit, buildRef) }

// Process handles one HTTP request's ext_proc stream. Whatever way the
// stream ends, the request's guard is released before Process returns (see
// the invariant in state.go).
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) (err error) {
	x := s.open(stream)
	defer func() {
		if p := recover(); p != nil {
			err = x.recovered(p)
		}
		s.close(x)
	}()
	for {
		// RecvMsg, unlike Recv, decodes into the stream's own message.
		if err := x.receive(stream); err != nil {
			return x.ended(err)
		}
		if end, err := x.step(); end {
			return err
		}
	}
}

// replySink is what an exchange needs of its stream: a way to send replies,
// and a context that ends when the gateway cancels the stream.
type replySink interface {
	Send(*extprocv3.ProcessingResponse) error
	Context() context.Context
}

// open starts an exchange for a stream; close ends it. Between them the
// stream's transport hands each received message to step (decoded into
// x.in) and, when the gateway ends the stream first, the error that ended
// it to ended.
func (s *Server) open(stream replySink) *exchange {
	x := s.states.Get().(*exchange)
	x.start(s, stream)
	return x
}

func (s *Server) close(x *exchange) {
	x.finish()
	s.states.Put(x)
}

// step handles the message in x.in. It reports end when the stream is over,
// with the status to end it with (nil: OK).
func (x *exchange) step() (end bool, err error) {
	done, err := x.handle(&x.in.ProcessingRequest)
	if err != nil {
		if v := asViolation(err); v != nil {
			x.release(reasonViolation)
			x.s.metrics.violation(v)
			x.s.opts.Log.Info("Ended a stream that broke the ext_proc protocol", "message", v.msg.String(), "state", v.state.String(), "path", pathOnly(x.path), "requestID", x.id())
			return true, status.Error(codes.InvalidArgument, v.Error())
		}
		// A send fails when the gateway has cancelled the stream.
		if x.stream.Context().Err() != nil {
			x.release(reasonCancelled)
		} else {
			x.release(reasonError)
		}
		return true, err
	}
	return done, nil
}

// ended releases the request of a stream the gateway ended, with recvErr:
// io.EOF when it closed its side, and returns the status to end it with.
func (x *exchange) ended(recvErr error) error {
	if errors.Is(recvErr, io.EOF) && x.endsWithStream() {
		x.completed()
	}
	x.release(endReason(recvErr, x.responseDone))
	if errors.Is(recvErr, io.EOF) {
		return nil
	}
	return recvErr
}

// recovered releases the request of a handler that panicked with p, logs
// it, and returns the status to end the stream with.
func (x *exchange) recovered(p any) error { return x.recoveredAt(p, debug.Stack()) }

// recoveredAt is recovered for a panic whose stack was taken where it was
// recovered. A request whose response had not ended fails: the gateway
// answers 500 (before routing) or cuts the response, and it counts as an
// Internal error; before routing, as a 500 too.
func (x *exchange) recoveredAt(p any, stack []byte) error {
	if x.state != awaitingRequest && !x.responseDone {
		if x.routedAt.IsZero() {
			x.s.metrics.request(500)
		}
		x.s.upstream.Failed(x.series, epmetrics.CodeInternal)
	}
	x.release(reasonPanic)
	x.s.opts.Log.Error(fmt.Errorf("%v", p), "Recovered from a panic in the ext_proc handler", "requestID", x.id(), "stack", string(stack))
	return status.Error(codes.Internal, "internal error")
}

// asViolation returns the protocol violation err carries, or nil. It is
// called only on the error path: the target of errors.As escapes.
func asViolation(err error) *violation {
	var v *violation
	if errors.As(err, &v) {
		return v
	}
	return nil
}

// endReason names why a stream ended: cleanly after a complete response,
// or early (the gateway cancels the stream when the client goes away).
// io.EOF, the gateway closing its side as every stream ends, is checked
// before status.Code, which builds a status for an error that carries none.
func endReason(err error, responseDone bool) string {
	switch {
	case errors.Is(err, io.EOF) && responseDone:
		return reasonCompleted
	case errors.Is(err, io.EOF), status.Code(err) == codes.Canceled:
		return reasonCancelled
	default:
		return reasonError
	}
}
