package policy

import (
	"errors"
	"fmt"
	"time"
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
	// HeadroomFactor multiplies each prediction before it is held against
	// the objective: above 1 leaves a margin (upstream's sloBufferFactor).
	// Default 1.
	HeadroomFactor float64 `json:"headroomFactor,omitempty" yaml:"headroomFactor,omitempty"`
	// ExploreNegative is the share of picks that, while some pods are
	// predicted to meet a request's objectives and some not, go among the
	// ones predicted not to, so that a pod recovering from overload is
	// measured again (upstream's epsilonExploreNeg). Default 0.01; set
	// 0 explicitly for never.
	ExploreNegative *float64 `json:"exploreNegative,omitempty" yaml:"exploreNegative,omitempty"`
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
	setDefault(&out.HeadroomFactor, 1)
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
	if !atLeast(s.HeadroomFactor, 0) || s.HeadroomFactor == 0 {
		errs = append(errs, fmt.Errorf("slo.headroomFactor: %v is invalid: must be a finite number > 0", s.HeadroomFactor))
	}
	if e := s.ExploreNegative; e != nil && !within(*e, 0, 1) {
		errs = append(errs, fmt.Errorf("slo.exploreNegative: %v is invalid: must be in [0, 1]", *e))
	}
	return errs
}
