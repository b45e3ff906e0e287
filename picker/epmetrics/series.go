package epmetrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferpick/inferpick/picker/openai"
)

// Series are the request series of one requested model and the target
// model it was sent as.
type Series struct {
	r      *Recorder
	model  string
	target string

	requests  prometheus.Counter
	duration  prometheus.Observer
	ttft      prometheus.Observer
	ntpot     prometheus.Observer
	reqSizes  prometheus.Observer
	respSizes prometheus.Observer
	inTokens  prometheus.Observer
	outTokens prometheus.Observer
	cached    prometheus.Observer
	running   prometheus.Gauge
	// objectives are the series of latency objectives; nil unless the
	// recorder tracks them.
	objectives *objectiveSeries
}

// objectiveSeries are a model's series of latency objectives.
type objectiveSeries struct {
	tpot, predTTFT, predTPOT     prometheus.Observer
	ttftViolation, tpotViolation prometheus.Counter
}

// Predicted records the latencies predicted for the endpoint picked; a
// zero one was not predicted.
func (s *Series) Predicted(ttft, tpot time.Duration) {
	if s == nil || s.objectives == nil {
		return
	}
	if ttft > 0 {
		s.objectives.predTTFT.Observe(ttft.Seconds())
	}
	if tpot > 0 {
		s.objectives.predTPOT.Observe(tpot.Seconds())
	}
}

// TTFTObjective counts a time to first token past the request's objective
// (0: none).
func (s *Series) TTFTObjective(ttft, objective time.Duration) {
	if s != nil && s.objectives != nil && objective > 0 && ttft > objective {
		s.objectives.ttftViolation.Inc()
	}
}

// TPOT records a streamed response's time per output token and counts it
// past the request's objective (0: none).
func (s *Series) TPOT(tpot, objective time.Duration) {
	if s == nil || s.objectives == nil {
		return
	}
	s.objectives.tpot.Observe(tpot.Seconds())
	if objective > 0 && tpot > objective {
		s.objectives.tpotViolation.Inc()
	}
}

// Labels returns the model_name and target_model_name the series carry
// (past the bound on models, __other__), or "" for no series: other series
// of the request use them too.
func (s *Series) Labels() (model, target string) {
	if s == nil {
		return "", ""
	}
	return s.model, s.target
}

// targetName is the series' target model, or "" for no series.
func (s *Series) targetName() string {
	if s == nil {
		return ""
	}
	return s.target
}

// Routed counts a routed request of bodyBytes and marks it running.
// Every Routed is followed by exactly one Ended.
func (s *Series) Routed(priority, bodyBytes int) {
	if priority == 0 {
		s.requests.Inc()
	} else {
		s.r.requests.WithLabelValues(s.model, s.target, strconv.Itoa(priority)).Inc()
	}
	s.reqSizes.Observe(float64(bodyBytes))
	s.running.Inc()
}

// FirstToken records the time from arrival to the first output.
func (s *Series) FirstToken(sinceArrival time.Duration) { s.ttft.Observe(sinceArrival.Seconds()) }

// Ended marks a routed request as no longer running.
func (s *Series) Ended() { s.running.Dec() }

// Completed records a response that ended normally: its duration since the
// request arrived, its size (responseBytes < 0: not known, not recorded), and
// the usage the model server reported.
func (s *Series) Completed(sinceArrival time.Duration, responseBytes int, u openai.Usage) {
	s.duration.Observe(sinceArrival.Seconds())
	if responseBytes >= 0 {
		s.respSizes.Observe(float64(responseBytes))
	}
	if u.PromptTokens > 0 {
		s.inTokens.Observe(float64(u.PromptTokens))
	}
	if u.CachedTokens > 0 {
		s.cached.Observe(float64(u.CachedTokens))
	}
	if u.CompletionTokens > 0 {
		s.outTokens.Observe(float64(u.CompletionTokens))
		if sinceArrival > 0 {
			s.ntpot.Observe(sinceArrival.Seconds() / float64(u.CompletionTokens))
		}
	}
}
