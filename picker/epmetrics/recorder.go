package epmetrics

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Label values of inference_objective_request_error_total{error_code}, as
// the upstream picker names them.
const (
	CodeBadRequest         = "BadRequest"
	CodeNotFound           = "NotFound"
	CodeInternal           = "Internal"
	CodeServiceUnavailable = "ServiceUnavailable"
	CodeModelServerError   = "ModelServerError"
	CodeResourceExhausted  = "ResourceExhausted"
)

// CodeOf is the error_code of a local reply with HTTP status code.
func CodeOf(status int) string {
	switch status {
	case 400, 413:
		return CodeBadRequest
	case 404:
		return CodeNotFound
	case 429:
		return CodeResourceExhausted
	case 503:
		return CodeServiceUnavailable
	default:
		return CodeInternal
	}
}

// maxModels bounds the model names that get series of their own: model
// names come from request bodies, and a client must not be able to grow
// the series without bound. Past it requests count under otherModel.
const (
	maxModels  = 256
	otherModel = "__other__"
)

// Recorder holds the upstream request series.
type Recorder struct {
	requests  *prometheus.CounterVec
	errors    *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	ttft      *prometheus.HistogramVec
	ntpot     *prometheus.HistogramVec
	reqSizes  *prometheus.HistogramVec
	respSizes *prometheus.HistogramVec
	inTokens  *prometheus.HistogramVec
	outTokens *prometheus.HistogramVec
	cached    *prometheus.HistogramVec
	running   *prometheus.GaugeVec
	schedule  prometheus.Histogram
	attempts  *prometheus.CounterVec
	info      *prometheus.GaugeVec
	// The prefill/decode split's decisions, under llm-d's name and its
	// deprecated one, which dashboards still read.
	disagg, pdDecisions *prometheus.CounterVec
	// The series of latency objectives, given to a model's series only
	// once TrackObjectives was called.
	tpot, predTTFT, predTPOT *prometheus.HistogramVec
	violations               *prometheus.CounterVec
	objectives               bool

	mu     sync.RWMutex
	models map[modelKey]*Series
	// served, when set, says whether some endpoint may serve a target
	// model: only such names, and those rewrite rules give, take one of
	// the maxModels series.
	served func(model string) bool

	ports [portSlots]atomic.Pointer[portLabel] // label values of the ports seen
}

// portSlots is how many port label values a Recorder keeps: as many as an
// InferencePool has target ports at most.
const portSlots = 8

// portLabel is a port and its label value.
type portLabel struct {
	port  int32
	value string
}

// portValue returns port as a label value, formatting it only the first
// time: a pool's endpoints share a few ports.
func (r *Recorder) portValue(port int32) string {
	slot := &r.ports[uint32(port)%portSlots]
	if l := slot.Load(); l != nil && l.port == port {
		return l.value
	}
	l := &portLabel{port: port, value: strconv.Itoa(int(port))}
	slot.Store(l)
	return l.value
}

// modelKey is a requested model and the target it was sent as.
type modelKey struct{ model, target string }

// NewRecorder returns a recorder registered with reg (nil registers
// nothing).
func NewRecorder(reg prometheus.Registerer) *Recorder {
	model := []string{"model_name", "target_model_name"}
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Subsystem: "inference_objective", Name: name, Help: help, Buckets: buckets}, model)
	}
	r := &Recorder{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "inference_objective", Name: "request_total",
			Help: "Requests routed, by model, target model and priority."}, append(model, "priority")),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "inference_objective", Name: "request_error_total",
			Help: "Requests that failed, by model, target model and error code."}, append(model, "error_code")),
		duration:  hist("request_duration_seconds", "Time from the request's arrival to the end of its response, in seconds.", latencyBuckets),
		ttft:      hist("request_ttft_seconds", "Time from the request's arrival to its first output token, in seconds.", latencyBuckets),
		ntpot:     hist("normalized_time_per_output_token_seconds", "Request duration divided by the output tokens the model server reported, in seconds.", ntpotBuckets),
		reqSizes:  hist("request_sizes", "Request body sizes in bytes.", requestSizeBuckets),
		respSizes: hist("response_sizes", "Response body sizes in bytes.", responseSizeBuckets),
		inTokens:  hist("input_tokens", "Prompt tokens the model server reported per request.", inputTokenBuckets),
		outTokens: hist("output_tokens", "Output tokens the model server reported per request.", outputTokenBuckets),
		cached:    hist("prompt_cached_tokens", "Prompt tokens served from the model server's prefix cache, per request.", inputTokenBuckets),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "inference_objective", Name: "running_requests",
			Help: "Requests routed whose response has not ended, by model."}, []string{"model_name"}),
		schedule: prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "inference_extension", Name: "scheduler_e2e_duration_seconds",
			Help: "Time to parse a request, look its prompt up and pick its endpoints (not the wait in the flow-control queue), in seconds.", Buckets: schedulerBuckets}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "inference_extension", Name: "scheduler_attempts_total",
			Help: "Picks attempted, by outcome and by the endpoint picked."}, []string{"status", "target_model_name", "pod_name", "namespace", "port"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{Subsystem: "inference_extension", Name: "info",
			Help: "The running build: always 1."}, []string{"commit", "build_ref"}),
		disagg: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_d_inference_scheduler_disagg_decision_total",
			Help: "Requests routed while encode, prefill and decode are split, by target model and decision: decode-only, prefill-decode, encode-decode or encode-prefill-decode."},
			[]string{"model_name", "decision_type"}),
		pdDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_d_inference_scheduler_pd_decision_total",
			Help: "Deprecated: llm_d_inference_scheduler_disagg_decision_total's prefill/decode part under its former name: decode-only or prefill-decode."},
			[]string{"model_name", "decision_type"}),
		tpot:     hist("request_tpot_seconds", "Time per output token of a streamed response after its first, in seconds.", tpotBuckets),
		predTTFT: hist("request_predicted_ttft_seconds", "Time to first token predicted for the endpoint picked, in seconds.", latencyBuckets),
		predTPOT: hist("request_predicted_tpot_seconds", "Time per output token predicted for the endpoint picked, in seconds.", tpotBuckets),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "inference_objective", Name: "request_slo_violation_total",
			Help: "Requests whose observed latency exceeded the objective they stated, by model, target model and type: ttft or tpot."},
			append(model, "type")),
		models: map[modelKey]*Series{},
	}
	if reg != nil {
		reg.MustRegister(r.requests, r.errors, r.duration, r.ttft, r.ntpot, r.reqSizes, r.respSizes,
			r.inTokens, r.outTokens, r.cached, r.running, r.schedule, r.attempts, r.info, r.disagg, r.pdDecisions,
			r.tpot, r.predTTFT, r.predTPOT, r.violations)
	}
	return r
}

// TrackObjectives gives the series made from now on the series of latency
// objectives: observed time per output token, predicted latencies and
// objectives missed. Call it before the first request.
func (r *Recorder) TrackObjectives() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.objectives = true
}

// Info sets the build info series.
func (r *Recorder) Info(commit, buildRef string) { r.info.WithLabelValues(commit, buildRef).Set(1) }

// OnlyServed gives series of their own only to target models served says
// some endpoint may serve, or a rewrite rule names; requests for other
// names count under otherModel. A client sending made-up names then cannot
// take the series the pool's own models need. Call it before the first
// request.
func (r *Recorder) OnlyServed(served func(model string) bool) { r.served = served }

// TargetFrom is what decided a request's target model.
type TargetFrom uint8

const (
	// NoRule is the request's model, or the rewrite header's: a client's
	// names.
	NoRule TargetFrom = iota
	// AnyModelRule is a rewrite rule for every model. The target is the
	// operator's name; the requested model a client's.
	AnyModelRule
	// NamedRule is a rewrite rule that lists the requested model. Both
	// names are the operator's.
	NamedRule
)

// Model returns the series of a model that no rewrite applies to: the
// request's model is also its target.
func (r *Recorder) Model(model string) *Series { return r.ModelTarget(model, model, NoRule) }

// ModelTarget returns the series of requests for model sent as target.
// A name only a client gives keeps a series of its own when an endpoint
// serves it; a name a rewrite rule gives keeps one whether or not an
// endpoint serves it, so that the requests a rule sends to a model not
// loaded yet show under both its names. Otherwise the name counts as
// otherModel: a client cannot make up names for a served target either.
func (r *Recorder) ModelTarget(model, target string, from TargetFrom) *Series {
	k := modelKey{model, target}
	if s, ok := r.lookup(k); ok {
		return s
	}
	switch {
	case r.served == nil:
	case from == NoRule && !r.served(target):
		k = modelKey{otherModel, otherModel}
	case model != target && from != NamedRule && !r.served(model):
		k.model = otherModel
	}
	// A name not served keeps no series of its own, so each of its
	// requests comes this way: the series it counts under usually exists.
	if s, ok := r.lookup(k); ok {
		return s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.models[k]; ok {
		return s
	}
	if len(r.models) >= maxModels {
		k = modelKey{otherModel, otherModel}
		if s, ok := r.models[k]; ok {
			return s
		}
	}
	s := r.newSeries(k)
	r.models[k] = s
	return s
}

// lookup returns the series of k, if it has one.
func (r *Recorder) lookup(k modelKey) (*Series, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.models[k]
	return s, ok
}

func (r *Recorder) newSeries(k modelKey) *Series {
	model, target := k.model, k.target
	return &Series{
		r: r, model: model, target: target,
		requests:  r.requests.WithLabelValues(model, target, "0"),
		duration:  r.duration.WithLabelValues(model, target),
		ttft:      r.ttft.WithLabelValues(model, target),
		ntpot:     r.ntpot.WithLabelValues(model, target),
		reqSizes:  r.reqSizes.WithLabelValues(model, target),
		respSizes: r.respSizes.WithLabelValues(model, target),
		inTokens:  r.inTokens.WithLabelValues(model, target),
		outTokens: r.outTokens.WithLabelValues(model, target),
		cached:    r.cached.WithLabelValues(model, target),
		running:   r.running.WithLabelValues(model),
		objectives: func() *objectiveSeries {
			if !r.objectives {
				return nil
			}
			return &objectiveSeries{
				tpot: r.tpot.WithLabelValues(model, target), predTTFT: r.predTTFT.WithLabelValues(model, target),
				predTPOT:      r.predTPOT.WithLabelValues(model, target),
				ttftViolation: r.violations.WithLabelValues(model, target, "ttft"),
				tpotViolation: r.violations.WithLabelValues(model, target, "tpot"),
			}
		}(),
	}
}

// Scheduled records a successful pick: its duration, the target model of
// the request's series (nil: none, the body was not parsed), bounded as the
// series are, and the endpoint.
func (r *Recorder) Scheduled(took time.Duration, s *Series, pod, namespace string, port int32) {
	r.schedule.Observe(took.Seconds())
	r.attempts.WithLabelValues("success", s.targetName(), pod, namespace, r.portValue(port)).Inc()
}

// Decision types of the encode/prefill/decode split, llm-d's label values.
const (
	DecodeOnly          = "decode-only"
	PrefillDecode       = "prefill-decode"
	EncodeDecode        = "encode-decode"
	EncodePrefillDecode = "encode-prefill-decode"
)

// Disaggregation counts a routed request's split decision: its multimodal
// inputs encoded on a pod of their own or not, its prompt prefilled on a
// pod of its own or not. The model is the target model of the request's
// series, bounded as the series are, or "unknown" for a request without
// one, as llm-d labels it. The former name counts the prefill/decode part
// alone, its two values.
func (r *Recorder) Disaggregation(s *Series, encoded, prefilled bool) {
	model := s.targetName()
	if model == "" {
		model = "unknown"
	}
	pd := DecodeOnly
	if prefilled {
		pd = PrefillDecode
	}
	decision := pd
	switch {
	case encoded && prefilled:
		decision = EncodePrefillDecode
	case encoded:
		decision = EncodeDecode
	}
	r.disagg.WithLabelValues(model, decision).Inc()
	r.pdDecisions.WithLabelValues(model, pd).Inc()
}

// ScheduleFailed records a pick that found no endpoint.
func (r *Recorder) ScheduleFailed(s *Series) {
	r.attempts.WithLabelValues("failure", s.targetName(), "", "", "").Inc()
}

// ForgetEndpoint deletes the picks counted under an endpoint that has left
// the pool, so that pod churn does not grow the series without bound.
func (r *Recorder) ForgetEndpoint(pod, namespace string, port int32) {
	r.attempts.DeletePartialMatch(prometheus.Labels{"pod_name": pod, "namespace": namespace, "port": r.portValue(port)})
}

// Failed counts a request that failed with code, before or after routing.
// A request whose model is not known yet counts under an empty model.
func (r *Recorder) Failed(s *Series, code string) {
	model, target := "", ""
	if s != nil {
		model, target = s.model, s.target
	}
	r.errors.WithLabelValues(model, target, code).Inc()
}
