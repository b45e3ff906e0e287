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

// profile returns the plugins of the one scheduling profile. Without
// schedulingProfiles it is upstream's default profile: every plugin that
// may be in one, each scorer weighted 1.
func (u *upstream) profile(list *yaml.Node) ([]profileRef, error) {
	if list == nil || len(list.Content) == 0 {
		var refs []profileRef
		for _, name := range u.order {
			p := u.plugins[name]
			if r := known[p.typ]; r.weight != nil || r.cacheAware || r.inProfile {
				refs = append(refs, profileRef{name: name, weight: 1, line: p.line})
			}
		}
		return refs, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: schedulingProfiles must be a list", list.Line)
	}
	if len(list.Content) > 1 {
		return nil, fmt.Errorf("line %d: %d scheduling profiles: inferpick runs one profile (single-profile-handler); prefill/decode disaggregation is not supported", list.Content[1].Line, len(list.Content))
	}
	prof := list.Content[0]
	nodes := lookup(prof, "plugins")
	if prof.Kind != yaml.MappingNode || nodes == nil || nodes.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: a scheduling profile needs a list of plugins", prof.Line)
	}
	refs := make([]profileRef, 0, len(nodes.Content))
	for _, ref := range nodes.Content {
		name, weight, err := readRef(ref)
		if err != nil {
			return nil, err
		}
		if _, ok := u.plugins[name]; !ok {
			return nil, fmt.Errorf("line %d: pluginRef %q names no plugin in plugins", ref.Line, name)
		}
		refs = append(refs, profileRef{name: name, weight: weight, line: ref.Line})
	}
	return refs, nil
}

// readProfiles maps the single scheduling profile onto the weighted scorer.
func (u *upstream) readProfiles(list *yaml.Node) error {
	refs, err := u.profile(list)
	if err != nil {
		return err
	}
	var ws policy.WeightedScorerConfig
	scorers, precise, picker := 0, false, false
	var sessionScorers, sessionFilters []string
	for _, ref := range refs {
		p := u.plugins[ref.name]
		role := known[p.typ]
		if role.cacheAware {
			precise = true
			continue
		}
		switch p.typ {
		case sessionScorer:
			sessionScorers = append(sessionScorers, ref.name)
		case sessionFilter:
			sessionFilters = append(sessionFilters, ref.name)
		}
		if role.weight != nil {
			*role.weight(&ws) += ref.weight
			if p.typ != sessionScorer {
				scorers++
			}
			continue
		}
		if !role.inProfile {
			return fmt.Errorf("line %d: plugin %q (%s) cannot be in a scheduling profile", ref.line, ref.name, p.typ)
		}
		if p.typ == maxScorePicker {
			picker = true
		}
		if n, ok := u.maxEndpoints[ref.name]; ok {
			u.out.MaxEndpoints = n
		}
	}
	if !picker {
		u.addPicker()
	}
	if err := u.sessionAffinity(sessionScorers, sessionFilters, &ws, precise); err != nil {
		return err
	}
	if precise {
		// The pods' own account of their caches, weighed against their
		// load: what cache-aware does with the KV-event index.
		u.out.Policy.Name = policy.CacheAware
		if scorers > 0 {
			u.warn("the weights of the scorers beside precise-prefix-cache-scorer have no effect: the cache-aware policy weighs each pod's load against what its cache holds")
		}
		return nil
	}
	u.out.Policy.Name = policy.WeightedScorer
	if scorers == 0 || ws == (policy.WeightedScorerConfig{}) {
		// No scorer, or all weighted 0: every endpoint ties, and the
		// max-score picker breaks ties at random.
		u.out.Policy.Name = policy.Random
		return nil
	}
	u.out.Policy.WeightedScorer = ws
	return nil
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
