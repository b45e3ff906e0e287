package fileconfig

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/policy"
)

// Upstream's latency plugins (GIE v1.5.0): a predictor of each request's
// time to first token and per output token on each pod, fed by sidecar
// servers there, and the plugins that act on its predictions. They become
// the policy's slo block, whose predictor the picker learns by itself.
const (
	// The predictors: the producer (with latency-scorer and the filters
	// of its pipeline) and the older scorer that predicts, tiers and
	// admits on its own.
	latencyProducer        = "predicted-latency-producer"
	predictedLatencyScorer = "predicted-latency-scorer"
	// What acts on a predictor's predictions.
	latencyScorer  = "latency-scorer"
	tierFilter     = "slo-headroom-tier-filter"
	sloAdmitter    = "latency-slo-admitter"
	affinityFilter = "prefix-cache-affinity-filter"
	weightedRandom = "weighted-random-picker"
)

// latencyParams is what one latency plugin's parameters ask of the slo
// block: nil where they leave it to the default.
type latencyParams struct {
	headroom, explore *float64
	// predictOff: predictInPrepareData false, upstream's training-only
	// mode, where nothing is routed by a prediction.
	predictOff bool
	// streaming is a predictor's streamingMode, nil where not given.
	streaming *bool
}

// Why the latency plugins' other parameters have no effect.
const (
	whySampling = "the picker learns a streamed response's time per output token from its first token to its end over all its tokens, with no sampling"
	whyTTL      = "the picker keeps a request's latency state with its stream and drops it when the stream ends"
	whyRole     = "the pods' roles come from their llm-d.ai/role label, and a request split over a prefill pod and a decode pod is not learned from"
	whyRanking  = "the pods predicted to meet a request's objectives are ranked by the policy (cache-aware unless the document weighs other scorers), not by their headroom"
	whyAffinity = "the cache-aware policy's cost model keeps a prompt on the pod that holds its prefix unless that pod's queue outweighs the prefill it saves, with no fixed share of the prompt"
)

// param is how one parameter of a latency plugin is read: checked as
// upstream checks it, then either applied to the slo block or warned
// about with why.
type param struct {
	kind paramKind
	// lo and hi bound a number; loOpen excludes lo itself.
	lo, hi float64
	loOpen bool
	why    string
	apply  func(*latencyParams, float64, bool)
}

type paramKind int

const (
	number paramKind = iota
	whole
	flag
	text
	anyValue
)

func num(lo, hi float64, loOpen bool, why string) param {
	return param{kind: number, lo: lo, hi: hi, loOpen: loOpen, why: why}
}

var (
	unbounded   = math.Inf(1)
	headroomArg = param{kind: number, lo: 0, hi: unbounded, loOpen: true, apply: func(l *latencyParams, f float64, _ bool) { l.headroom = &f }}
	exploreArg  = param{kind: number, lo: 0, hi: 1, apply: func(l *latencyParams, f float64, _ bool) { l.explore = &f }}
	weightArg   = num(0, unbounded, false, whyRanking)
	// anyWeight is a latency-scorer weight: upstream's factory checks none.
	anyWeight = num(math.Inf(-1), unbounded, false, whyRanking)
	streamArg = param{kind: flag, apply: func(l *latencyParams, _ float64, b bool) { l.streaming = &b }}
)

// latencyParamSpecs are the parameters of each latency plugin type, with
// upstream's bounds.
var latencyParamSpecs = map[string]map[string]param{
	latencyProducer: {
		"sloBufferFactor":                    headroomArg,
		"samplingMean":                       num(0, unbounded, true, whySampling),
		"maxDecodeTokenSamplesForPrediction": {kind: whole, lo: 0, hi: unbounded, why: whySampling},
		"contextTTL":                         {kind: anyValue, why: whyTTL},
		"streamingMode":                      streamArg,
		"endpointRoleLabel":                  {kind: text, why: whyRole},
		"predictInPrepareData": {kind: flag, apply: func(l *latencyParams, _ float64, b bool) {
			l.predictOff = !b
		}},
	},
	predictedLatencyScorer: {
		"sloBufferFactor":           headroomArg,
		"epsilonExploreNeg":         exploreArg,
		"samplingMean":              num(0, unbounded, true, whySampling),
		"maxSampledTokens":          {kind: whole, lo: 0, hi: unbounded, why: whySampling},
		"negHeadroomTTFTWeight":     weightArg,
		"negHeadroomTPOTWeight":     weightArg,
		"headroomTTFTWeight":        weightArg,
		"headroomTPOTWeight":        weightArg,
		"headroomSelectionStrategy": {kind: text, why: whyRanking},
		"compositeKVWeight":         weightArg,
		"compositeQueueWeight":      weightArg,
		"compositePrefixWeight":     weightArg,
		"selectionMode":             {kind: text, why: whyRanking},
		"epsilonExploreSticky":      num(0, 1, false, whyAffinity),
		"affinityGateTau":           num(0, 1, false, whyAffinity),
		"affinityGateTauGlobal":     num(0, 1, false, whyAffinity),
		"affinityMaxTTFTPenaltyMs":  num(0, unbounded, false, whyAffinity),
		"contextTTL":                {kind: anyValue, why: whyTTL},
		"streamingMode":             streamArg,
		"endpointRoleLabel":         {kind: text, why: whyRole},
	},
	latencyScorer: {
		"ttftWeight":                anyWeight,
		"tpotWeight":                anyWeight,
		"headroomSelectionStrategy": {kind: text, why: whyRanking},
		"compositeKVWeight":         anyWeight,
		"compositeQueueWeight":      anyWeight,
		"compositePrefixWeight":     anyWeight,
	},
	tierFilter: {"epsilonExploreNeg": exploreArg},
	affinityFilter: {
		"affinityThreshold":      num(math.Inf(-1), 1, false, whyAffinity),
		"explorationProbability": num(0, 1, false, whyAffinity),
		"maxTTFTPenaltyMs":       num(0, unbounded, false, whyAffinity),
	},
	sloAdmitter: {},
}

// readLatency reads a latency plugin's parameters: each checked as
// upstream checks it (an error naming the line), then applied to the slo
// block or warned about; one upstream does not read warns too.
func (u *upstream) readLatency(p plugin) error {
	var l latencyParams
	specs := latencyParamSpecs[p.typ]
	if hasParams(p) {
		for i := 0; i+1 < len(p.params.Content); i += 2 {
			k, v := p.params.Content[i], p.params.Content[i+1]
			spec, ok := specs[k.Value]
			if !ok {
				u.warn(fmt.Sprintf("%s parameter %s has no effect: upstream reads no such parameter", label(p), k.Value))
				continue
			}
			f, b, err := spec.read(p.typ, k.Value, v)
			if err != nil {
				return err
			}
			if spec.apply != nil {
				spec.apply(&l, f, b)
				continue
			}
			u.warn(fmt.Sprintf("%s %s %s has no effect: %s", label(p), k.Value, v.Value, spec.why))
		}
	}
	if u.latency == nil {
		u.latency = map[string]latencyParams{}
	}
	u.latency[p.name] = l
	return nil
}

// label names a plugin in a warning: its type, and its name when it has
// one of its own.
func label(p plugin) string {
	if p.name == p.typ {
		return p.typ
	}
	return p.name + " (" + p.typ + ")"
}

// read checks one parameter's value.
func (s param) read(typ, key string, v *yaml.Node) (float64, bool, error) {
	if s.kind == anyValue {
		return 0, false, nil
	}
	if v.Kind != yaml.ScalarNode {
		return 0, false, fmt.Errorf("line %d: %s %s must be a single value", v.Line, typ, key)
	}
	switch s.kind {
	case flag:
		b, err := boolean(typ+" "+key, v)
		return 0, b, err
	case text:
		return 0, false, nil
	case whole:
		n, err := integer(typ, key, v)
		if err != nil {
			return 0, false, err
		}
		if float64(n) < s.lo {
			return 0, false, fmt.Errorf("line %d: %s %s %d must be ≥ %v", v.Line, typ, key, n, s.lo)
		}
		return float64(n), false, nil
	}
	f, err := strconv.ParseFloat(v.Value, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false, fmt.Errorf("line %d: %s %s %q is not a number", v.Line, typ, key, v.Value)
	}
	switch {
	case s.loOpen && f <= s.lo:
		return 0, false, fmt.Errorf("line %d: %s %s %v must be > %v", v.Line, typ, key, f, s.lo)
	case !s.loOpen && f < s.lo, f > s.hi:
		return 0, false, fmt.Errorf("line %d: %s %s %v must be in %s", v.Line, typ, key, f, s.bounds())
	}
	return f, false, nil
}

func (s param) bounds() string {
	switch {
	case math.IsInf(s.lo, -1):
		return fmt.Sprintf("(-∞, %v]", s.hi)
	case math.IsInf(s.hi, 1):
		return fmt.Sprintf("[%v, ∞)", s.lo)
	}
	return fmt.Sprintf("[%v, %v]", s.lo, s.hi)
}

// latencyProfile is what a profile's latency plugins make of the slo block.
type latencyProfile struct {
	// predictors are the predicted-latency-producer and
	// predicted-latency-scorer plugins the profile lists, by name, and
	// then (withProducers) the producers it does not list: upstream runs
	// a producer, a request-control plugin, wherever plugins declare it.
	predictors []string
	// listed counts the predictors the profile lists, which come first.
	listed int
	// tiers: a tier filter, or the scorer that tiers itself, is listed.
	tiers bool
	// actors are the plugins that act on predictions, by name.
	actors []string
}

// withProducers adds the producers plugins declare that the profile does
// not list to the profile's predictors.
func (lp *latencyProfile) withProducers(u *upstream) {
	lp.listed = len(lp.predictors)
	for _, name := range u.ofType(latencyProducer) {
		if !slices.Contains(lp.predictors[:lp.listed], name) {
			lp.predictors = append(lp.predictors, name)
		}
	}
}

// first says where the predictor named is the first: in the profile, or,
// the profile listing none, in plugins.
func (lp *latencyProfile) first(name string) string {
	if slices.Contains(lp.predictors[:lp.listed], name) {
		return "the first in the profile"
	}
	return "the first in plugins"
}

// note records a profile plugin of the latency family.
func (lp *latencyProfile) note(name, typ string) {
	switch typ {
	case latencyProducer:
		lp.predictors = append(lp.predictors, name)
	case predictedLatencyScorer:
		lp.predictors = append(lp.predictors, name)
		lp.tiers = true
	case tierFilter:
		lp.tiers = true
		lp.actors = append(lp.actors, name)
	case latencyScorer:
		lp.actors = append(lp.actors, name)
	}
}

// onlyBesideAPredictor checks the plugins that load only beside a
// predictor: without one they are refused with what to use, as they were
// before the slo block.
func (u *upstream) onlyBesideAPredictor(lp latencyProfile) error {
	if len(lp.predictors) > 0 {
		return nil
	}
	for _, name := range u.order {
		p := u.plugins[name]
		if p.typ == affinityFilter || p.typ == weightedRandom {
			return fmt.Errorf("line %d: plugin type %q is not supported without a latency predictor (%s in plugins, or %s in the scheduling profile): use %s", p.line, p.typ, latencyProducer, predictedLatencyScorer, instead[p.typ])
		}
	}
	return nil
}

// applyLatency sets the slo block from the predictors, the profile's
// latency plugins and the document's admitters.
func (u *upstream) applyLatency(refs []profileRef, lp latencyProfile) {
	admitters := u.ofType(sloAdmitter)
	if len(lp.predictors) == 0 {
		for _, name := range append(lp.actors, admitters...) {
			u.warn(fmt.Sprintf("%s (%s) has no effect: upstream it acts on the predictions of %s, which plugins do not declare", name, u.plugins[name].typ, latencyProducer))
		}
		return
	}
	if len(lp.actors) == 0 && len(admitters) == 0 && !lp.tiers {
		// Upstream the predictions are made and learned from, and
		// nothing routes or admits by them.
		for _, name := range lp.predictors {
			u.warn(fmt.Sprintf("%s has no effect: nothing acts on its predictions (no %s, %s or %s in the scheduling profile, no %s in plugins), so latency objectives route nothing, as upstream", name, tierFilter, latencyScorer, predictedLatencyScorer, sloAdmitter))
		}
		return
	}
	names := make([]string, 0, len(refs)+len(lp.predictors))
	for _, ref := range refs {
		names = append(names, ref.name)
	}
	names = append(names, lp.predictors[lp.listed:]...)
	slo := policy.SLOConfig{Admission: len(admitters) > 0}
	var headroom, explore *float64
	var headroomFrom, exploreFrom string
	var whole *bool
	var wholeFrom string
	for _, name := range names {
		l, ok := u.latency[name]
		if !ok {
			continue
		}
		if u.plugins[name].typ == predictedLatencyScorer {
			// It admits as latency-slo-admitter does.
			slo.Admission = true
		}
		if l.predictOff {
			u.warn(fmt.Sprintf("%s predictInPrepareData false leaves the slo block off: upstream then predicts nothing, and every pod is picked as if no objective were stated", name))
			return
		}
		headroom = u.takeOnce(&lp, headroom, l.headroom, &headroomFrom, name, "sloBufferFactor")
		explore = u.takeOnce(&lp, explore, l.explore, &exploreFrom, name, "epsilonExploreNeg")
		if w, ok := wholeResponse(u.plugins[name].typ, l); ok {
			whole = u.takeStreaming(&lp, whole, w, &wholeFrom, name)
		}
	}
	slo.WholeResponse = whole != nil && *whole
	if headroom != nil {
		slo.BufferFactor = *headroom
	}
	slo.ExploreNegative = explore
	if !lp.tiers {
		// Upstream's latency-scorer prefers the pods predicted to meet
		// the objectives and never explores the others.
		zero := 0.0
		slo.ExploreNegative = &zero
	}
	u.out.Policy.SLO = &slo
}

// takeOnce returns the value the slo block takes: cur, set by the plugin
// named *from, or else v, set by the plugin named by. A v that differs
// from cur warns.
func (u *upstream) takeOnce(lp *latencyProfile, cur, v *float64, from *string, by, key string) *float64 {
	switch {
	case v == nil:
		return cur
	case cur == nil:
		*from = by
		return v
	case *cur != *v:
		u.warn(fmt.Sprintf("%s %s %v has no effect: the slo block takes %s's %v, %s", by, key, *v, *from, *cur, lp.first(*from)))
	}
	return cur
}

// wholeResponse is the slo block's wholeResponse a predictor asks for:
// upstream's producer records a response's time to first token at its end
// and predicts no time per output token unless streamingMode is true; its
// predicted-latency-scorer streams unless streamingMode is false. ok is
// false for the plugins that predict nothing.
func wholeResponse(typ string, l latencyParams) (whole, ok bool) {
	switch typ {
	case latencyProducer:
		whole = true
	case predictedLatencyScorer:
		whole = false
	default:
		return false, false
	}
	if l.streaming != nil {
		whole = !*l.streaming
	}
	return whole, true
}

// takeStreaming is takeOnce for a predictor's wholeResponse, warning in
// the terms of its streamingMode.
func (u *upstream) takeStreaming(lp *latencyProfile, cur *bool, whole bool, from *string, by string) *bool {
	switch {
	case cur == nil:
		*from = by
		return &whole
	case *cur != whole:
		u.warn(fmt.Sprintf("%s streamingMode %v has no effect: the slo block follows %s's streamingMode %v, %s", by, !whole, *from, !*cur, lp.first(*from)))
	}
	return cur
}

// ofType returns the names of the plugins of type typ, in document order.
func (u *upstream) ofType(typ string) []string {
	var names []string
	for _, name := range u.order {
		if u.plugins[name].typ == typ {
			names = append(names, name)
		}
	}
	return names
}
