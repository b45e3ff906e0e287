package fileconfig

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/policy"
)

// The scorers of load that become the weighted scorer's load scores
// (policy.LoadScores), with the tuning their parameters ask for.
const (
	activeRequestScorer = "active-request-scorer"
	runningScorer       = "running-requests-size-scorer"
	loadAwareScorer     = "load-aware-scorer"
	noHitScorer         = "no-hit-lru-scorer"
)

// loadTuning is what one load scorer's parameters tune.
type loadTuning struct {
	active    policy.ActiveRequestScore
	threshold int // load-aware-scorer's
}

// tuning records a load scorer's tuning by its name.
func (u *upstream) tuning(p plugin, t loadTuning) {
	if u.loadTunings == nil {
		u.loadTunings = map[string]loadTuning{}
	}
	u.loadTunings[p.name] = t
}

// readActiveRequest reads llm-d's active-request-scorer: idleThreshold
// and maxBusyScore tune the score as there (a negative idleThreshold is
// 0, a maxBusyScore outside [0,1] is 1, as llm-d takes them); unset,
// maxBusyScore is llm-d's 0, which its configurations get. requestTimeout
// warns: llm-d stops counting a request in flight that long (2m by
// default), where the picker counts it until it ends, its guard released
// on every exit path.
func (u *upstream) readActiveRequest(p plugin) error {
	var t loadTuning
	if hasParams(p) {
		for i := 0; i+1 < len(p.params.Content); i += 2 {
			k, v := p.params.Content[i], p.params.Content[i+1]
			switch k.Value {
			case "requestTimeout":
				u.warn(fmt.Sprintf("active-request-scorer requestTimeout %s has no effect: llm-d stops counting a request in flight that long, where the picker counts each until it ends, released on every exit path (end of stream, error, client gone), so a long request stays counted and none outlives its end", v.Value))
			case "idleThreshold":
				n, err := integer(p.typ, k.Value, v)
				if err != nil {
					return err
				}
				if n < 0 {
					u.warn(fmt.Sprintf("active-request-scorer idleThreshold %d is taken as 0, as llm-d does: only a pod with nothing in flight is idle", n))
					n = 0
				}
				t.active.IdleThreshold = n
			case "maxBusyScore":
				f, err := strconv.ParseFloat(v.Value, 64)
				if v.Kind != yaml.ScalarNode || err != nil {
					return fmt.Errorf("line %d: active-request-scorer maxBusyScore %q is not a number", v.Line, v.Value)
				}
				if !(f >= 0 && f <= 1) {
					u.warn(fmt.Sprintf("active-request-scorer maxBusyScore %s is taken as 1, as llm-d does", v.Value))
					f = 1
				}
				t.active.MaxBusyScore = f
			default:
				u.warn(fmt.Sprintf("active-request-scorer parameter %s has no effect: it takes requestTimeout, idleThreshold and maxBusyScore", k.Value))
			}
		}
	}
	u.tuning(p, t)
	return nil
}

// readLoadAware reads llm-d's load-aware-scorer's threshold, the queue
// that scores 0; 128 when omitted, and when not positive, as llm-d takes
// it.
func (u *upstream) readLoadAware(p plugin) error {
	t := loadTuning{threshold: policy.DefaultLoadAwareThreshold}
	if hasParams(p) {
		for i := 0; i+1 < len(p.params.Content); i += 2 {
			k, v := p.params.Content[i], p.params.Content[i+1]
			if k.Value != "threshold" {
				u.warn(fmt.Sprintf("load-aware-scorer parameter %s has no effect: it takes threshold only", k.Value))
				continue
			}
			n, err := integer(p.typ, k.Value, v)
			if err != nil {
				return err
			}
			if n <= 0 {
				u.warn(fmt.Sprintf("load-aware-scorer threshold %d is taken as %d, as llm-d does", n, policy.DefaultLoadAwareThreshold))
				n = policy.DefaultLoadAwareThreshold
			}
			t.threshold = n
		}
	}
	u.tuning(p, t)
	return nil
}

// readNoHit reads llm-d's no-hit-lru-scorer, whose parameters tune
// nothing here: a prompt is cold when no candidate holds a block of it in
// the weighted scorer's prefix index (every prompt, when the profile
// weighs no prefix-cache-scorer, as upstream has no prefix match without
// one), and each pod's last cold pick is one stamp of its own, with no
// list of pods to bound.
func (u *upstream) readNoHit(p plugin) error {
	if !hasParams(p) {
		return nil
	}
	var prefix []string
	for _, name := range paramNames(p) {
		switch name {
		case "prefixPluginName", "prefixPluginType":
			prefix = append(prefix, name)
		case "lruSize":
			u.warn("no-hit-lru-scorer lruSize has no effect: each pod's last cold pick is one stamp of the pod's own, with no list of pods to bound")
		default:
			u.warn(fmt.Sprintf("no-hit-lru-scorer parameter %s has no effect: it takes prefixPluginName, prefixPluginType and lruSize", name))
		}
	}
	if len(prefix) > 0 {
		verb := "has"
		if len(prefix) > 1 {
			verb = "have"
		}
		u.warn(fmt.Sprintf("no-hit-lru-scorer %s %s no effect: a prompt is cold when no pod holds a block of it in the prefix index the weighted scorer keeps", strings.Join(prefix, " and "), verb))
	}
	return nil
}

// tune sets on ws what the load scorer of ref tunes. Two scorers of one
// type weighed in a profile must tune alike: the weighted scorer has one
// score of each.
func (u *upstream) tune(p plugin, ref profileRef, ws *policy.WeightedScorerConfig) error {
	t, ok := u.loadTunings[p.name]
	if !ok || ref.weight == 0 {
		return nil
	}
	if u.tunedBy == nil {
		u.tunedBy = map[string]string{}
	}
	prev, seen := u.tunedBy[p.typ]
	u.tunedBy[p.typ] = p.name
	switch p.typ {
	case activeRequestScorer:
		if seen && ws.ActiveRequest != t.active {
			return fmt.Errorf("line %d: active-request-scorers %q and %q tune idleThreshold or maxBusyScore differently: the weighted scorer has one active-request score", ref.line, prev, p.name)
		}
		ws.ActiveRequest = t.active
	case loadAwareScorer:
		if seen && ws.LoadAwareThreshold != t.threshold {
			return fmt.Errorf("line %d: load-aware-scorers %q and %q have different thresholds (%d, %d): the weighted scorer has one load-aware score", ref.line, prev, p.name, ws.LoadAwareThreshold, t.threshold)
		}
		ws.LoadAwareThreshold = t.threshold
	}
	return nil
}

// noHitWithoutPrefix is the warning for a no-hit-lru-scorer weighed in a
// profile that weighs no prefix-cache-scorer while one is declared: the
// weighted scorer then takes every prompt as cold, where upstream finds
// the matches of any prefix-cache-scorer declared.
const noHitWithoutPrefix = "no-hit-lru-scorer takes every prompt as cold here: the profile weighs no prefix-cache-scorer, and the weighted scorer finds a prompt's prefix only when it weighs one, where upstream finds it when a prefix-cache-scorer is among the plugins; weigh it in the profile for a prompt some pod holds to score 0.5 everywhere"

// noHitBesidePrecise is the warning for a no-hit-lru-scorer weighed
// beside precise-prefix-cache-scorer, whose cache-aware policy places
// cold prompts its own way.
const noHitBesidePrecise = "no-hit-lru-scorer has no effect beside precise-prefix-cache-scorer: the cache-aware policy sends a prompt no pod holds to the least loaded pod, and among pods alike a lone picker takes the one holding the fewest cached blocks, picker replicas the prompt's home (rendezvous hashing of its first blocks, bounded by load), which spreads new prefixes over the pods as the LRU order does"
