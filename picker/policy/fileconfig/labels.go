package fileconfig

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/policy"
)

// llm-d's filters of the pods by their labels: each becomes one of the
// policy's label filters, of the stage whose profile lists it.
const (
	byLabel         = "by-label"
	byLabelSelector = "by-label-selector"
)

// readLabelFilter checks a by-label or by-label-selector plugin's
// parameters, as llm-d's factories do, and records the filter it is.
func (u *upstream) readLabelFilter(p plugin) error {
	var f policy.LabelFilter
	var err error
	if p.typ == byLabel {
		f, err = u.byLabelParams(p)
	} else {
		f, err = u.selectorParams(p)
	}
	if err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return fmt.Errorf("line %d: %s %q%w", p.line, p.typ, p.name, err)
	}
	u.labelFilters[p.name] = f
	return nil
}

// byLabelParams reads by-label's label, validValues and allowsNoLabel.
// llm-d reads no others, and refuses an empty label, and no validValues
// without allowsNoLabel.
func (u *upstream) byLabelParams(p plugin) (policy.LabelFilter, error) {
	var f policy.LabelFilter
	var inert []string
	for i := 0; p.params != nil && i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch k.Value {
		case "label":
			if v.Kind != yaml.ScalarNode || isNull(v) {
				return f, fmt.Errorf("line %d: %s label must name a pod label", v.Line, byLabel)
			}
			f.Label = v.Value
		case "validValues":
			vals, err := scalars(byLabel+" validValues", v)
			if err != nil {
				return f, err
			}
			f.Values = vals
		case "allowsNoLabel":
			on, err := boolean(byLabel+" allowsNoLabel", v)
			if err != nil {
				return f, err
			}
			f.AllowsNoLabel = on
		default:
			inert = append(inert, k.Value)
		}
	}
	if f.Label == "" {
		return f, fmt.Errorf("line %d: %s %q needs a label, as llm-d requires", p.line, byLabel, p.name)
	}
	if len(f.Values) == 0 && !f.AllowsNoLabel {
		return f, fmt.Errorf("line %d: %s %q needs validValues, or allowsNoLabel true, as llm-d requires: else it keeps no pod", p.line, byLabel, p.name)
	}
	if len(inert) > 0 {
		u.warn(fmt.Sprintf("%s parameters %s have no effect: it takes label, validValues and allowsNoLabel", byLabel, strings.Join(inert, ", ")))
	}
	return f, nil
}

// selectorParams reads by-label-selector's parameters, a Kubernetes label
// selector: matchLabels and matchExpressions. llm-d reads no others; with
// neither the filter keeps every pod, as there.
func (u *upstream) selectorParams(p plugin) (policy.LabelFilter, error) {
	sel := &policy.LabelSelector{}
	var inert []string
	for i := 0; p.params != nil && i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch k.Value {
		case "matchLabels":
			if isNull(v) {
				continue
			}
			if v.Kind != yaml.MappingNode {
				return policy.LabelFilter{}, fmt.Errorf("line %d: %s matchLabels must be a mapping of label to value", v.Line, byLabelSelector)
			}
			sel.MatchLabels = make(map[string]string, len(v.Content)/2)
			for j := 0; j+1 < len(v.Content); j += 2 {
				lk, lv := v.Content[j], v.Content[j+1]
				if lv.Kind != yaml.ScalarNode {
					return policy.LabelFilter{}, fmt.Errorf("line %d: %s matchLabels %q must be a single value", lv.Line, byLabelSelector, lk.Value)
				}
				sel.MatchLabels[lk.Value] = lv.Value
			}
		case "matchExpressions":
			if isNull(v) {
				continue
			}
			if v.Kind != yaml.SequenceNode {
				return policy.LabelFilter{}, fmt.Errorf("line %d: %s matchExpressions must be a list", v.Line, byLabelSelector)
			}
			for _, e := range v.Content {
				r, err := requirement(e)
				if err != nil {
					return policy.LabelFilter{}, err
				}
				sel.MatchExpressions = append(sel.MatchExpressions, r)
			}
		default:
			inert = append(inert, k.Value)
		}
	}
	if len(inert) > 0 {
		u.warn(fmt.Sprintf("%s parameters %s have no effect: it takes a label selector's matchLabels and matchExpressions", byLabelSelector, strings.Join(inert, ", ")))
	}
	if len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0 {
		u.warn(fmt.Sprintf("%s %q selects no label: it keeps every pod, as in llm-d", byLabelSelector, p.name))
	}
	return policy.LabelFilter{Selector: sel}, nil
}

// requirement reads one of matchExpressions: key, operator, values.
func requirement(e *yaml.Node) (policy.LabelRequirement, error) {
	var r policy.LabelRequirement
	if e.Kind != yaml.MappingNode {
		return r, fmt.Errorf("line %d: %s matchExpressions entry must be a mapping of key, operator and values", e.Line, byLabelSelector)
	}
	for i := 0; i+1 < len(e.Content); i += 2 {
		k, v := e.Content[i], e.Content[i+1]
		switch k.Value {
		case "key", "operator":
			if v.Kind != yaml.ScalarNode {
				return r, fmt.Errorf("line %d: %s matchExpressions %s must be a single value", v.Line, byLabelSelector, k.Value)
			}
			if k.Value == "key" {
				r.Key = v.Value
			} else {
				r.Operator = v.Value
			}
		case "values":
			vals, err := scalars(byLabelSelector+" matchExpressions values", v)
			if err != nil {
				return r, err
			}
			r.Values = vals
		default:
			return r, fmt.Errorf("line %d: unknown %s matchExpressions field %q: it takes key, operator and values", k.Line, byLabelSelector, k.Value)
		}
	}
	if err := (policy.LabelFilter{Selector: &policy.LabelSelector{MatchExpressions: []policy.LabelRequirement{r}}}).Validate(); err != nil {
		return r, fmt.Errorf("line %d: %s matchExpressions entry%s", e.Line, byLabelSelector, strings.TrimPrefix(err.Error(), ".selector"))
	}
	return r, nil
}

// scalars reads a list of single values; null is none.
func scalars(what string, v *yaml.Node) ([]string, error) {
	if isNull(v) {
		return nil, nil
	}
	if v.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: %s must be a list of values", v.Line, what)
	}
	out := make([]string, 0, len(v.Content))
	for _, s := range v.Content {
		if s.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: %s must be a list of single values", s.Line, what)
		}
		out = append(out, s.Value)
	}
	return out, nil
}

// stageLabelFilters returns the label filters a profile lists, in its
// order, and whether it lists the stage's role filter (prefill-filter or
// decode-filter).
func (u *upstream) stageLabelFilters(p *schedProfile) ([]policy.LabelFilter, bool) {
	var fs []policy.LabelFilter
	role := false
	for _, ref := range p.refs {
		switch typ := u.plugins[ref.name].typ; typ {
		case byLabel, byLabelSelector:
			fs = append(fs, u.labelFilters[ref.name])
		case prefillFilter, decodeFilter:
			role = true
		}
	}
	return fs, role
}

// prefillStage sets the prefill stage's pods from the prefill profile: its
// label filters, and, for one without prefill-filter, every pod of the pool
// to pick among (disaggregation.prefillPods all), as llm-d's profile then
// picks among every pod its label filters keep, every pod when it has none.
func (u *upstream) prefillStage(prefill *schedProfile, d *policy.DisaggregationConfig) {
	fs, role := u.stageLabelFilters(prefill)
	d.PrefillLabelFilters = fs
	if !role {
		d.PrefillPods = policy.PrefillPodsAll
	}
}
