package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
)

// Request headers that state a request's latency objectives, in
// milliseconds, as the upstream picker's latency plugins read them.
const (
	TTFTObjectiveHeader = "x-slo-ttft-ms"
	TPOTObjectiveHeader = "x-slo-tpot-ms"
)

// SLOConfig routes requests that state latency objectives (SLO) to the
// pods predicted to meet them, as the upstream picker's latency predictor
// does, with a model the picker learns by itself (predict.go): no training
// or prediction servers. Every request trains it: its time to first token
// and its time per output token, observed on its response, against what
// the pod's state was when it was picked. A request with objectives is
// picked among the pods predicted to meet both; with none predicted to,
// among all, by the policy as usual. Requests without objectives are
// picked as if the block were absent.
type SLOConfig struct {
	// BufferFactor multiplies a request's TPOT objective before the
	// predictions are held against it, as upstream's sloBufferFactor:
	// above 1 loosens it, below 1 leaves a margin. TTFT objectives are
	// held as stated. Default 1.
	BufferFactor float64 `json:"bufferFactor,omitempty" yaml:"bufferFactor,omitempty"`
	// ExploreNegative is the share of picks that, while some pods are
	// predicted to meet a request's objectives and some not, go among the
	// ones predicted not to, so that a pod recovering from overload is
	// measured again (upstream's epsilonExploreNeg). Default 0.01; set
	// 0 explicitly for never.
	ExploreNegative *float64 `json:"exploreNegative,omitempty" yaml:"exploreNegative,omitempty"`
	// WholeResponse holds the TTFT objective against the time to the end
	// of the response, learned from every response that completes, and
	// judges no TPOT objective, as the upstream picker's latency predictor
	// does without its streamingMode (its default). Off, the TTFT
	// objective is the time to the first token, learned from streamed
	// responses, and TPOT objectives are judged.
	WholeResponse bool `json:"wholeResponse,omitempty" yaml:"wholeResponse,omitempty"`
	// Admission refuses a sheddable request (priority below 0) that
	// states objectives when no pod is predicted to meet them, none is
	// idle and none has a nearly empty KV cache, where predictions are
	// least reliable (upstream's latency-slo-admitter): ErrObjectives.
	Admission bool `json:"admission,omitempty" yaml:"admission,omitempty"`
}

// DefaultExploreNegative is SLOConfig.ExploreNegative's default.
const DefaultExploreNegative = 0.01

// ErrObjectives reports that a sheddable request's latency objectives are
// predicted to be missed on every candidate (SLOConfig.Admission).
var ErrObjectives = errors.New("no candidate worker is predicted to meet the request's latency objectives")

// SLO is a request's latency objectives; a zero duration states none.
type SLO struct {
	TTFT, TPOT time.Duration
	// Sheddable says the request may be refused when no pod is predicted
	// to meet them (SLOConfig.Admission).
	Sheddable bool
}

// Set reports whether s states an objective.
func (s SLO) Set() bool { return s.TTFT > 0 || s.TPOT > 0 }

// defaultSLO sets the defaults of an SLO block.
func defaultSLO(c *SLOConfig) *SLOConfig {
	if c == nil {
		return nil
	}
	out := *c
	setDefault(&out.BufferFactor, 1)
	if out.ExploreNegative == nil {
		e := DefaultExploreNegative
		out.ExploreNegative = &e
	}
	return &out
}

// validateSLO checks the SLO block.
func (c Config) validateSLO() []error {
	s := c.SLO
	if s == nil {
		return nil
	}
	var errs []error
	if !atLeast(s.BufferFactor, 0) || s.BufferFactor == 0 {
		errs = append(errs, fmt.Errorf("slo.bufferFactor: %v is invalid: must be a finite number > 0", s.BufferFactor))
	}
	if e := s.ExploreNegative; e != nil && !within(*e, 0, 1) {
		errs = append(errs, fmt.Errorf("slo.exploreNegative: %v is invalid: must be in [0, 1]", *e))
	}
	return errs
}

// Tiers of a candidate for a request with objectives: the picks go to the
// lowest tier that has candidates, by cost within it.
const (
	tierMeets  = 0
	tierMisses = 1
)

// judge sorts the candidates of a request with objectives into the pods
// predicted to meet them and the others, and reports whether none is
// predicted to meet them; it returns ErrObjectives when, besides, the
// request is sheddable, admission is on and no pod is idle or nearly
// empty. An objective whose model has not learned enough is taken as met.
// While some meet and some miss, one pick in 1/ExploreNegative goes among
// those that miss.
func (e *engine) judge(p *pick, m *model) (missed bool, err error) {
	slo := p.req.SLO
	tpotJudged := m.tpotOK && !e.slo.cfg.WholeResponse // a whole response's pace is not judged
	if !slo.Set() || !m.ttftOK && !tpotJudged {
		return false, nil
	}
	factor := e.slo.cfg.BufferFactor
	meets, idle, cold := 0, false, false
	for i := range p.cands {
		cd := &p.cands[i]
		x := featuresOf(p, cd)
		ttft, tpot := m.predict(cd.w, &x)
		// The pace the request must keep is its own objective's, and that
		// of the requests in flight there that stated one (upstream judges
		// by the least too): one placed on a pod shares its steps with them.
		tpotObjective := time.Duration(0)
		if tpotJudged {
			tpotObjective = slo.TPOT
			if least := cd.w.LeastTPOTObjective(); least > 0 && (tpotObjective <= 0 || least < tpotObjective) {
				tpotObjective = least
			}
		}
		cd.tier = tierMisses
		if (slo.TTFT <= 0 || !m.ttftOK || seconds(ttft) <= slo.TTFT) &&
			(tpotObjective <= 0 || tpot <= tpotObjective.Seconds()*factor) {
			cd.tier = tierMeets
			meets++
		}
		idle = idle || cd.w.InFlight() == 0 && (cd.metrics == nil || cd.metrics.Running+cd.metrics.Waiting == 0)
		cold = cold || cd.metrics != nil && cd.metrics.KVUsage < coldKV
	}
	switch {
	case meets == 0 && slo.Sheddable && e.slo.cfg.Admission && !idle && !cold:
		return true, ErrObjectives
	case meets == 0:
		return true, nil // one tier: the order is the costs'
	case meets == len(p.cands):
		return false, nil
	}
	if explore := *e.slo.cfg.ExploreNegative; explore > 0 && float64(p.rand()>>11)/(1<<53) < explore {
		for i := range p.cands {
			p.cands[i].tier ^= tierMisses
		}
	}
	return false, nil
}

// coldKV is the KV-cache usage below which a pod counts as nearly empty,
// where the upstream admitter finds predictions unreliable and admits.
const coldKV = 0.02

// predicted fills out with m's prediction for the primary picked, the
// model the pick was judged by.
func (e *engine) predicted(p *pick, m *model, primary *registry.Worker, out *Prediction) {
	for i := range p.cands {
		if cd := &p.cands[i]; cd.w == primary {
			x := featuresOf(p, cd)
			ttft, tpot := m.predict(cd.w, &x)
			*out = Prediction{TTFT: seconds(ttft), TPOT: seconds(tpot), worker: cd.w, x: x}
			return
		}
	}
	out.Reset()
}

// WholeResponse reports whether the TTFT objective is held against the
// whole response's time, and learned from every response that completes
// (SLOConfig.WholeResponse).
func (e *engine) WholeResponse() bool { return e.slo != nil && e.slo.cfg.WholeResponse }

// Predicts reports whether the policy predicts latencies (Config.SLO):
// whether Request.Predicted is filled and the observed latencies learned.
func (e *engine) Predicts() bool { return e.slo != nil }

// ObserveTTFT implements LatencyObserver.
func (e *engine) ObserveTTFT(p *Prediction, ttft time.Duration) {
	if e.slo != nil {
		e.slo.observe(p, ttft, false)
	}
}

// ObserveTPOT implements LatencyObserver.
func (e *engine) ObserveTPOT(p *Prediction, tpot time.Duration) {
	if e.slo != nil {
		e.slo.observe(p, tpot, true)
	}
}

var _ LatencyObserver = (*engine)(nil)
