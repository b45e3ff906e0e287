package extproc

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// Request headers of the upstream endpoint-picker protocol that select the
// request's priority and fairness flow. Both are removed before the request
// goes upstream.
const (
	ObjectiveHeader = "x-gateway-inference-objective"
	FairnessHeader  = "x-gateway-inference-fairness-id"
)

// DefaultFairnessID is the flow of a request without a fairness id, as the
// upstream picker names it: such requests share one flow, with those that
// name it.
const DefaultFairnessID = "default-flow"

// Admitter queues requests while the pool is saturated (flowcontrol.Queue).
type Admitter interface {
	Admit(ctx context.Context, it flowcontrol.Item, try flowcontrol.TryFunc) error
	Notify()
}

// Priorities maps an InferenceObjective name to its priority.
type Priorities interface {
	Priority(name string) (int, bool)
}

var (
	_ Admitter   = (*flowcontrol.Queue)(nil)
	_ Priorities = (*flowcontrol.Priorities)(nil)
)

// Reasons a request could not be admitted.
var (
	errSaturated   = errors.New("every endpoint of the pool is saturated")
	errNoPick      = errors.New("no endpoint could be picked")
	errNoEndpoints = errors.New("the pool has no ready endpoint")
	errNoDecoders  = errors.New("no ready endpoint of the pool decodes (llm-d.ai/role)")
	errEmptySubset = errors.New("no endpoint of the pool is in the gateway's subset")
	errParked      = errors.New("the endpoints that serve the model are not ready")
	errUnlabelled  = errors.New("no ready endpoint of the pool passes the policy's label filters")
	errObjectives  = errors.New("no endpoint is predicted to meet the request's latency objectives (" +
		policy.TTFTObjectiveHeader + ", " + policy.TPOTObjectiveHeader + "), and the request is sheddable")
	errNotAdmitted  = []error{flowcontrol.ErrQueueFull, flowcontrol.ErrTimeout, flowcontrol.ErrEvicted, flowcontrol.ErrShed, flowcontrol.ErrStopped}
	errStatusByKind = map[error]int{errSaturated: 429, errNoPick: 503, errNoEndpoints: 503, errNoDecoders: 503, errEmptySubset: 503, errParked: 503, errUnlabelled: 503, errObjectives: 429}
)

// modelNotServedError reports that no ready endpoint of the pool serves the
// requested model: a 404, as a model server answers an unknown model.
type modelNotServedError struct{ model string }

func (e modelNotServedError) Error() string {
	return "The model `" + e.model + "` does not exist: no ready endpoint of the pool serves it."
}

// contextLengthError reports that no ready endpoint's context-length range
// holds the request's prompt (the policy's contextLength.filter), of about
// tokens tokens: a 400 when it is longer than every range, as a model
// server answers a prompt past its context, else a 503 (the pool's ranges
// leave a gap).
type contextLengthError struct {
	tokens  int
	tooLong bool
}

func (e contextLengthError) Error() string {
	if e.tooLong {
		return fmt.Sprintf("The prompt, about %d tokens, is longer than every endpoint of the pool takes: no context-length range label holds it.", e.tokens)
	}
	return fmt.Sprintf("No ready endpoint of the pool takes a prompt of about %d tokens: no context-length range label holds it.", e.tokens)
}

// ranger is a picker that routes by the prompt's context length
// (policy.ContextLengthConfig.Filter): it tells what sets apart the
// endpoints a request may go to, for the flow-control queue to key its
// waiters by.
type ranger interface {
	AppendRangeKey(dst []byte, req *policy.Request, candidates []*registry.Worker) ([]byte, bool)
}

// admit picks the request's endpoints and takes the load guard on the
// primary, through the flow-control queue when there is one: a request
// that finds the pool saturated then waits, holding no guard, until
// capacity frees. Without the queue, as the upstream picker without its
// flow-control layer, only a sheddable request (negative priority) is
// refused for endpoints past the queue and KV-cache thresholds; another is
// picked among them, to wait in the model servers' own queues. The
// in-flight cap refuses either.
func (x *exchange) admit() error {
	if x.s.opts.Queue == nil {
		x.pick.Overflow = x.priority >= 0
		ok, err := x.tryPick()
		if err == nil && !ok {
			err = errSaturated
		}
		return err
	}
	if x.s.opts.Reserve != nil {
		x.pick.Reserve = x.s.opts.Reserve(x.priority)
	}
	model, target := x.series.Labels() // bounded, as the request's other series
	flow := x.fairnessID
	if flow == "" {
		flow = DefaultFairnessID
	}
	it := flowcontrol.Item{Priority: x.priority, FlowID: flow, Bytes: int64(len(x.body)), Model: model,
		TargetModel: target, Endpoints: x.pick.Model}
	if x.objectives.ttftStated { // the stated objective from the request's arrival; 0 is due at once, as upstream orders it
		it.Deadline = x.arrived.Add(x.objectives.slo.TTFT)
	}
	if x.subset.present {
		it.Endpoints += "\x00" + x.subset.String()
	}
	if r, ok := x.s.picker.(ranger); ok {
		var held bool
		if x.rangeKey, held = r.AppendRangeKey(x.rangeKey[:0], &x.pick, x.s.decoders()); !held {
			// Refused whatever the load: the refusal comes at once, never
			// after a wait in the queue.
			ok, err := x.tryPick()
			if ok || err != nil && !errors.Is(err, errParked) {
				return err
			}
		}
		if len(x.rangeKey) > 0 || !held {
			it.Endpoints += "\x00\x00" + string(x.rangeKey)
		}
	}
	return x.s.opts.Queue.Admit(x.waitContext(), it, x.tryPickQueued)
}

// tryPickQueued is tryPick for the flow-control queue, whose dispatcher
// runs it on its own goroutine: a panic there, out of reach of the stream's
// recovery, would end the process. It comes back as a pickPanic, which the
// stream ends as it ends a handler that panicked. A request whose model
// only parked workers serve waits in the queue, as one whose endpoints are
// full does: the registry wakes the queue when a parked worker returns.
func (x *exchange) tryPickQueued() (ok bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			ok, err = false, &pickPanic{value: p, stack: debug.Stack()}
		}
	}()
	ok, err = x.tryPick()
	if errors.Is(err, errParked) {
		return false, nil
	}
	return ok, err
}

// pickPanic is a panic recovered from a pick, with where it happened.
type pickPanic struct {
	value any
	stack []byte
}

func (p *pickPanic) Error() string { return fmt.Sprint("the pick panicked: ", p.value) }

// tryPick runs the policy over the current candidates. It reports false when
// every candidate is saturated; on success x.picked and x.guard are set.
func (x *exchange) tryPick() (bool, error) {
	start := x.s.opts.Clock.Now()
	// The registry's snapshot is immutable and the policy copies what it
	// keeps, so candidates are only copied when the subset hint narrows them.
	candidates := x.s.decoders()
	if x.subset.present {
		x.allowed = x.subset.appendAllowed(x.allowed[:0], candidates)
		candidates = x.allowed
	}
	if d := x.s.opts.DataParallel; d != nil && !x.reachesRank() {
		candidates = x.onPrimary(candidates, d.PrimaryPort)
	}
	x.pick.Subset = x.subset.present
	if ttft := x.objectives.slo.TTFT; ttft > 0 {
		// The objective counts from the request's arrival: one that waited
		// in the queue has only what is left of it (at least a
		// nanosecond: still an objective, one no pod is predicted to meet).
		x.pick.SLO.TTFT = max(ttft-start.Sub(x.arrived), 1)
	}
	if len(candidates) == 0 {
		if x.parkedMayServe() {
			return false, errParked
		}
		if x.subset.present {
			return false, errEmptySubset
		}
		if x.s.roles != nil && len(x.s.reg.Workers()) > 0 {
			return false, errNoDecoders
		}
		return false, errNoEndpoints
	}
	var span trace.Span
	if x.span != nil {
		_, span = x.s.opts.Tracer.Start(x.spanCtx, spanPick, trace.WithTimestamp(start),
			trace.WithAttributes(attribute.String("gen_ai.request.model", clip(x.pick.Model)), attribute.Int("inferpick.candidates", len(candidates))))
		defer func() {
			if span != nil { // the pick panicked: its span ends all the same
				span.SetStatus(otelcodes.Error, "the pick panicked")
				span.End()
			}
		}()
	}
	picked, guard, err := x.pickAndAdmit(candidates)
	if span != nil {
		if len(picked) > 0 {
			span.SetAttributes(attribute.String("inferpick.endpoint", picked[0].Address()))
		}
		if err != nil {
			span.SetStatus(otelcodes.Error, clip(err.Error()))
		}
		span.End()
		span = nil
	}
	switch {
	case errors.Is(err, policy.ErrSaturated):
		return false, nil
	case errors.Is(err, policy.ErrModelNotServed):
		if x.parkedMayServe() {
			return false, errParked
		}
		return false, modelNotServedError{model: x.pick.Model}
	case errors.Is(err, policy.ErrContextLength):
		return false, contextLengthError{tokens: x.pick.Tokens, tooLong: errors.Is(err, policy.ErrPromptTooLong)}
	case errors.Is(err, policy.ErrLabelFilter):
		// A pod the filters keep, parked in a readiness flap, is waited
		// for as in a pool without filters.
		if x.parkedMayServe() {
			return false, errParked
		}
		return false, errUnlabelled
	case errors.Is(err, policy.ErrObjectives):
		return false, errObjectives
	case err != nil || len(picked) == 0:
		return false, errNoPick
	}
	x.picked = picked
	x.guard = guard
	x.disaggregate()
	x.pickTook = x.s.opts.Clock.Now().Sub(start)
	return true, nil
}

// parkedMayServe reports whether a worker parked while its pod is unready
// (a readiness flap: its server runs on), whose pod decodes, passes the
// policy's label filters and is within the gateway's subset, may serve the
// request's model: it lists the model, or has not listed all its models.
// The request then waits for it, or is answered 503, rather than told that
// the model does not exist.
func (x *exchange) parkedMayServe() bool {
	if x.s.parked == nil {
		return false
	}
	keep := x.s.opts.LabelFilter
	for _, w := range x.s.parked() {
		if !w.Parked() || w.Removed() || !w.Role().Decodes() || keep != nil && !keep(w) ||
			x.subset.present && !x.subset.allows(w.Endpoint().Address) {
			continue
		}
		if mayServe(w, x.pick.Model) {
			return true
		}
	}
	return false
}

// admitAttempts is how many picks a request makes when, each time, other
// requests fill its primary between the pick and the guard.
const admitAttempts = 3

// pickAndAdmit runs the policy and takes the guard on the primary. Under a
// maxInFlight bound the guard is taken only while the primary has room, in
// one atomic step, so that requests admitted together never pass the bound;
// a primary filled since the pick is picked again, and after admitAttempts
// the request counts as saturated.
func (x *exchange) pickAndAdmit(candidates []*registry.Worker) ([]*registry.Worker, *registry.Guard, error) {
	attempts := admitAttempts
	if x.admitLimit() <= 0 {
		attempts = 1 // the guard is always taken
	}
	for range attempts {
		picked, err := x.runPicker(&x.pickBuf, &x.pick, candidates, 1+x.fallbacks())
		if err != nil || len(picked) == 0 {
			return picked, nil, err
		}
		if g, ok := x.admitOn(picked[0], x.objectives.slo.TPOT); ok {
			return picked, g, nil
		}
	}
	return nil, nil, policy.ErrSaturated
}

// admitLimit is the in-flight bound the request's guards are taken under:
// maxInFlight less the request's Reserve (one place always usable), 0 for
// none.
func (x *exchange) admitLimit() int64 {
	limit := int64(x.s.opts.MaxInFlight)
	if limit > 0 && x.pick.Reserve > 0 {
		limit = max(limit-int64(x.pick.Reserve), 1)
	}
	return limit
}

// admitOn takes a guard on w, only while w has room under admitLimit when
// there is one, holding the request's TPOT objective there (0: none; the
// pods that prefill or encode for another take none).
func (x *exchange) admitOn(w *registry.Worker, tpot time.Duration) (*registry.Guard, bool) {
	if limit := x.admitLimit(); limit > 0 {
		return w.AdmitBelowWith(limit, tpot)
	}
	return w.AdmitWith(tpot), true
}

// runPicker runs the picker once for req, into *buf (kept across streams)
// when the picker can append.
func (x *exchange) runPicker(buf *[]*registry.Worker, req *policy.Request, candidates []*registry.Worker, n int) ([]*registry.Worker, error) {
	p, ok := x.s.picker.(appendPicker)
	if !ok {
		return x.s.picker.Pick(req, candidates, n)
	}
	picked, err := p.AppendPick((*buf)[:0], req, candidates, n)
	*buf = picked
	return picked, err
}

// refusal is the local reply to a request admit refused, or ok false when
// the stream itself ended (the client went away while the request waited).
func refusal(err error) (status int, reason string, ok bool) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return 0, "", false
	}
	for _, e := range errNotAdmitted {
		if errors.Is(err, e) {
			return 429, "the pool is saturated: " + err.Error(), true
		}
	}
	if nf := (modelNotServedError{}); errors.As(err, &nf) {
		return 404, err.Error(), true
	}
	if cl := (contextLengthError{}); errors.As(err, &cl) {
		if cl.tooLong {
			return 400, err.Error(), true
		}
		return 503, err.Error(), true
	}
	if s, found := errStatusByKind[err]; found {
		return s, err.Error(), true
	}
	return 503, err.Error(), true
}

// pickFailed reports whether admit's err is a pick that found no endpoint,
// or panicked: a failed scheduler attempt. A request flow control turned
// away, or whose client went away while it waited, is none.
func pickFailed(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) { // errGatewayClosed too
		return false
	}
	for _, e := range errNotAdmitted {
		if errors.Is(err, e) {
			return false
		}
	}
	return !errors.Is(err, errObjectives) // shed, as flow control sheds
}

// readPriority sets the request's priority from its objective header.
func (x *exchange) readPriority(objective string) {
	x.priority = 0
	if objective == "" || x.s.opts.Priorities == nil {
		return
	}
	p, ok := x.s.opts.Priorities.Priority(objective)
	if !ok {
		x.s.metrics.unknownObjectives.Inc()
		return
	}
	x.priority = p
}

// fallbacks is how many endpoints after the primary a request's destination
// lists: none with Options.DataParallel, whose header names the primary's
// rank alone (another pod's sidecar would refuse it, and another rank of
// the same pod is reached through the same primary port).
func (x *exchange) fallbacks() int {
	if x.s.opts.DataParallel != nil {
		return 0
	}
	return x.s.opts.Fallbacks
}
