package fileconfig

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/policy"
)

// profileRef is one plugin of the scheduling profile and its weight.
type profileRef struct {
	name   string
	weight float64
	line   int
}

// profiles returns the scheduling profiles. Without schedulingProfiles
// there is upstream's default profile: every plugin that may be in one,
// each scorer weighted 1.
func (u *upstream) profiles(list *yaml.Node) ([]schedProfile, error) {
	if list == nil || len(list.Content) == 0 {
		var refs []profileRef
		for _, name := range u.order {
			p := u.plugins[name]
			if r := known[p.typ]; r.weight != nil || r.cacheAware || r.inProfile {
				refs = append(refs, profileRef{name: name, weight: 1, line: p.line})
			}
		}
		return []schedProfile{{refs: refs}}, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: schedulingProfiles must be a list", list.Line)
	}
	profs := make([]schedProfile, 0, len(list.Content))
	for _, prof := range list.Content {
		nodes := lookup(prof, "plugins")
		if prof.Kind != yaml.MappingNode || nodes == nil || nodes.Kind != yaml.SequenceNode {
			return nil, fmt.Errorf("line %d: a scheduling profile needs a list of plugins", prof.Line)
		}
		sp := schedProfile{line: prof.Line, refs: make([]profileRef, 0, len(nodes.Content))}
		if name := lookup(prof, "name"); name != nil {
			sp.name = name.Value
		}
		for _, other := range profs {
			if other.name == sp.name {
				return nil, fmt.Errorf("line %d: scheduling profile name %q is used twice", prof.Line, sp.name)
			}
		}
		for _, ref := range nodes.Content {
			name, weight, err := readRef(ref)
			if err != nil {
				return nil, err
			}
			if _, ok := u.plugins[name]; !ok {
				return nil, fmt.Errorf("line %d: pluginRef %q names no plugin in plugins", ref.Line, name)
			}
			sp.refs = append(sp.refs, profileRef{name: name, weight: weight, line: ref.Line})
		}
		profs = append(profs, sp)
	}
	return profs, nil
}

// readProfiles maps the scheduling profile onto the policy: the one
// profile, or the decode profile of a prefill/decode handler, whose
// prefill profile turns disaggregation on (disagg.go).
func (u *upstream) readProfiles(list *yaml.Node) error {
	profs, err := u.profiles(list)
	if err != nil {
		return err
	}
	decode, prefill, encode := &profs[0], (*schedProfile)(nil), (*schedProfile)(nil)
	if err := u.checkDataParallel(profs); err != nil {
		return err
	}
	switch s := u.stages; {
	case s != nil && (list == nil || len(list.Content) == 0):
		return fmt.Errorf("line %d: %s needs schedulingProfiles: a decode profile (%q) and, to prefill apart, a prefill profile (%q)", s.line, s.typ, s.decode, s.prefill)
	case s != nil:
		if decode, prefill, encode, err = s.split(profs); err != nil {
			return err
		}
	case len(profs) > 1:
		return fmt.Errorf("line %d: %d scheduling profiles: without a prefill/decode profile handler (%s, %s) inferpick runs one profile", profs[1].line, len(profs), disaggHandler, pdHandler)
	}
	if err := u.checkStageFilters(decode, decodeStage); err != nil {
		return err
	}
	if prefill != nil {
		if err := u.checkStageFilters(prefill, prefillStage); err != nil {
			return err
		}
	}
	if encode != nil {
		if err := u.checkStageFilters(encode, encodeStage); err != nil {
			return err
		}
	}
	if err := u.checkSessionProfiles(); err != nil {
		return err
	}
	if err := u.translate(decode.refs); err != nil {
		return err
	}
	u.out.Policy.LabelFilters, _ = u.stageLabelFilters(decode)
	u.applyDataParallel()
	if u.stages != nil {
		return u.disaggregate(u.stages, decode, prefill, encode)
	}
	return nil
}

// translate maps a scheduling profile's plugins onto the weighted scorer,
// or onto cache-aware with the precise prefix-cache scorer.
func (u *upstream) translate(refs []profileRef) error {
	var ws policy.WeightedScorerConfig
	scorers, precise, picker := 0, false, false
	var sessionScorers, sessionFilters, lengths []string
	tokenizer := false
	var lp latencyProfile
	for _, ref := range refs {
		p := u.plugins[ref.name]
		role := known[p.typ]
		lp.note(ref.name, p.typ)
		if role.cacheAware {
			precise = true
			continue
		}
		switch p.typ {
		case sessionScorer:
			sessionScorers = append(sessionScorers, ref.name)
		case sessionFilter:
			sessionFilters = append(sessionFilters, ref.name)
		case contextLengthAware:
			lengths = append(lengths, ref.name)
		case "tokenizer":
			tokenizer = true
		}
		if role.weight != nil {
			*role.weight(&ws) += ref.weight
			if err := u.tune(p, ref, &ws); err != nil {
				return err
			}
			if p.typ != sessionScorer {
				scorers++
			}
			continue
		}
		if !role.inProfile {
			return fmt.Errorf("line %d: plugin %q (%s) cannot be in a scheduling profile", ref.line, ref.name, p.typ)
		}
		if p.typ == maxScorePicker || p.typ == weightedRandom {
			picker = true
		}
		if n, ok := u.maxEndpoints[ref.name]; ok {
			u.out.MaxEndpoints = n
		}
	}
	lp.withProducers(u)
	if err := u.onlyBesideAPredictor(lp); err != nil {
		return err
	}
	u.applyLatency(refs, lp)
	if !picker {
		u.addPicker()
	}
	if err := u.sessionAffinity(sessionScorers, sessionFilters, &ws, precise); err != nil {
		return err
	}
	if err := u.contextLength(lengths, precise, tokenizer); err != nil {
		return err
	}
	if precise {
		// The pods' own account of their caches, weighed against their
		// load: what cache-aware does with the KV-event index.
		u.out.Policy.Name = policy.CacheAware
		if scorers > 0 {
			u.warn("the weights of the scorers beside precise-prefix-cache-scorer have no effect: the cache-aware policy weighs each pod's load against what its cache holds")
		}
		if ws.NoHitLRUWeight > 0 {
			u.warn(noHitBesidePrecise)
		}
		return nil
	}
	u.out.Policy.Name = policy.WeightedScorer
	if len(lp.predictors) > 0 && (lp.listed > 0 || len(lp.actors) > 0) && scorers == 0 {
		// The latency pipeline weighs no scorer of ours: the pods
		// predicted to meet a request's objectives are ranked by
		// cache-aware, whose cost model does what the pipeline's
		// affinity filters do.
		u.out.Policy.Name = policy.CacheAware
		return nil
	}
	if scorers == 0 || ws == (policy.WeightedScorerConfig{}) {
		// No scorer, or all weighted 0: every endpoint ties, and the
		// max-score picker breaks ties at random.
		u.out.Policy.Name = policy.Random
		return nil
	}
	if ws.NoHitLRUWeight > 0 && ws.PrefixWeight == 0 && u.declares("prefix-cache-scorer") {
		u.warn(noHitWithoutPrefix)
	}
	// The profile's weights are all it weighs: the picker's 2/2/3 are not
	// added to a session or context-length weight alone.
	ws.NoDefaultWeights = ws.TakesDefaults()
	u.out.Policy.WeightedScorer = ws
	return nil
}

// declares reports whether a plugin of type typ is among the plugins.
func (u *upstream) declares(typ string) bool {
	for _, p := range u.plugins {
		if p.typ == typ {
			return true
		}
	}
	return false
}

// maxScorePicker is the one picker type read.
const maxScorePicker = "max-score-picker"

// addPicker does what upstream does for a profile that lists no picker: it
// adds the picker of plugins, whose maxNumOfEndpoints then applies.
func (u *upstream) addPicker() {
	var pickers []string
	for _, name := range u.order {
		if u.plugins[name].typ == maxScorePicker {
			pickers = append(pickers, name)
		}
	}
	if len(pickers) == 0 {
		return
	}
	if len(pickers) > 1 {
		u.warn(fmt.Sprintf("the scheduling profile lists none of the max-score-pickers %s: upstream adds any one of them, here the first, %q", strings.Join(pickers, ", "), pickers[0]))
	}
	if n, ok := u.maxEndpoints[pickers[0]]; ok {
		u.out.MaxEndpoints = n
	}
}

// readRef reads {pluginRef, weight}; the weight defaults to 1.
func readRef(ref *yaml.Node) (string, float64, error) {
	if ref.Kind != yaml.MappingNode {
		return "", 0, fmt.Errorf("line %d: a profile plugin must be a mapping with a pluginRef", ref.Line)
	}
	name, weight := "", 1.0
	for i := 0; i+1 < len(ref.Content); i += 2 {
		k, v := ref.Content[i], ref.Content[i+1]
		switch k.Value {
		case "pluginRef":
			name = v.Value
		case "weight":
			w, err := strconv.ParseFloat(v.Value, 64)
			if err != nil || !(w >= 0) || math.IsInf(w, 0) {
				return "", 0, fmt.Errorf("line %d: weight %q must be a number ≥ 0", v.Line, v.Value)
			}
			weight = w
		default:
			return "", 0, fmt.Errorf("line %d: unknown profile plugin field %q", k.Line, k.Value)
		}
	}
	if name == "" {
		return "", 0, fmt.Errorf("line %d: profile plugin has no pluginRef", ref.Line)
	}
	return name, weight, nil
}
